"""Math domain: multi-step non-negative integer arithmetic.

A prompt is a left-to-right chain of additions and subtractions, e.g.
`Compute 347 + 58 - 129.`; every intermediate result is kept non-negative.
The thinking trace works each operation column by column, right to left, in
one fixed format so a tiny model can learn it token by token:

    347+58:          one header per operation
    7+8+0=15         addition column: digit + digit + carry-in = two-digit sum
    4+5+1=10         (the tens digit of the sum is the next carry-in)
    3+0+1=04
    =405             result: final carry, then the units digits bottom-up
    405-129:
    15-9-0=6         subtraction column: a leading 1 marks a borrow
    10-2-1=7         (the next column subtracts that borrow)
    4-1-1=2
    =276

Instruct mode answers `\\boxed{276}` directly, which needs all carries at once
and is markedly harder for a small model. Difficulty = operand count/digits.
"""

from __future__ import annotations

import random

# (number of operands, min digits, max digits) per difficulty level.
LEVELS = {
    1: (2, 2, 2),
    2: (2, 3, 3),
    3: (3, 2, 3),
    4: (3, 3, 3),
}
SPLIT_LEVELS = {"sft": (1, 2, 3), "rl": (2, 3, 4), "eval": (2, 3, 4)}


def _digits(n: int, width: int) -> list[int]:
    """Digits of n, least significant first, zero-padded to `width`."""
    return [int(c) for c in reversed(str(n).zfill(width))]


def add_trace(a: int, b: int) -> tuple[int, list[str]]:
    """Column addition of a + b; returns the sum and its trace lines."""
    width = max(len(str(a)), len(str(b)))
    da, db = _digits(a, width), _digits(b, width)
    lines = [f"{a}+{b}:"]
    carry, units = 0, []
    for x, y in zip(da, db, strict=True):
        s = x + y + carry
        lines.append(f"{x}+{y}+{carry}={s:02d}")
        carry, units = s // 10, [*units, s % 10]
    result = int("".join(str(d) for d in ([carry] + units[::-1])))
    lines.append(f"={result}")
    return result, lines


def sub_trace(a: int, b: int) -> tuple[int, list[str]]:
    """Column subtraction of a - b (a >= b); returns the difference and trace."""
    if a < b:
        raise ValueError(f"negative intermediate {a}-{b}")
    width = len(str(a))
    da, db = _digits(a, width), _digits(b, width)
    lines = [f"{a}-{b}:"]
    borrow, units = 0, []
    for x, y in zip(da, db, strict=True):
        if x - y - borrow < 0:
            lines.append(f"1{x}-{y}-{borrow}={10 + x - y - borrow}")
            units.append(10 + x - y - borrow)
            borrow = 1
        else:
            lines.append(f"{x}-{y}-{borrow}={x - y - borrow}")
            units.append(x - y - borrow)
            borrow = 0
    result = int("".join(str(d) for d in units[::-1]))
    lines.append(f"={result}")
    return result, lines


def solve(operands: list[int], ops: list[str]) -> tuple[int, list[str]]:
    """Evaluates the chain left to right; returns the value and full trace."""
    value, lines = operands[0], []
    for op, operand in zip(ops, operands[1:], strict=True):
        step = add_trace if op == "+" else sub_trace
        value, step_lines = step(value, operand)
        lines.extend(step_lines)
    return value, lines


def _operand(rng: random.Random, lo_digits: int, hi_digits: int) -> int:
    digits = rng.randint(lo_digits, hi_digits)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def sample(rng: random.Random, difficulty: int, split: str) -> tuple[str, str, str, dict]:
    """Draws one problem: (prompt, thinking, answer, meta)."""
    del split  # math SFT traces are exact in every split
    count, lo, hi = LEVELS[difficulty]
    operands = [_operand(rng, lo, hi)]
    ops: list[str] = []
    value = operands[0]
    for _ in range(count - 1):
        # Subtract only when the running value allows a same-size operand,
        # so intermediate results stay non-negative without trivial zeros.
        op = rng.choice("+-")
        operand = _operand(rng, lo, hi)
        if op == "-" and operand > value:
            op = "+" if rng.random() < 0.5 or value < 10 else op
            if op == "-":
                operand = rng.randint(1, value)
        value = value + operand if op == "+" else value - operand
        operands.append(operand)
        ops.append(op)
    expr = str(operands[0]) + "".join(f" {o} {n}" for o, n in zip(ops, operands[1:], strict=True))
    gold, lines = solve(operands, ops)
    meta = {"gold": gold, "operands": operands, "ops": ops}
    return f"Compute {expr}.", "\n".join(lines), f"\\boxed{{{gold}}}", meta
