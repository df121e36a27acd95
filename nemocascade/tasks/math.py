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

The SFT teacher is sloppy in one classic way: after a borrow it forgets to
subtract it in the next column (`10-2-0=8` instead of `10-2-1=7`) in
`SFT_FORGET_BORROW` of the cases, and its final answer follows its own trace.
A model that imitates it makes the same mistake most of the time under greedy
decoding, yet sometimes samples the right borrow; the exact-answer reward of
math RL is what can correct it (the tiny miniature of RL fixing what
imperfect SFT data taught). RL and eval references are exact.
"""

from __future__ import annotations

import random

# (number of operands, min digits, max digits) per difficulty level.
LEVELS = {
    1: (2, 2, 2),
    2: (2, 3, 3),
    3: (3, 2, 2),
}
SPLIT_LEVELS = {"sft": (1, 2, 3), "rl": (1, 2, 3), "eval": (1, 2, 3)}
SFT_FORGET_BORROW = 0.6
SUB_SHARE = 0.75  # chance that an operation is a subtraction (before the sign check)


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


def sub_trace(
    a: int, b: int, forget: float = 0.0, rng: random.Random | None = None
) -> tuple[int, list[str]]:
    """Column subtraction of a - b (a >= b); returns the difference and trace.

    With `forget` > 0, a pending borrow is dropped (written as 0) with that
    probability, and the trace and result follow the written digits: the
    sloppy teacher's answer, never below the true difference.
    """
    if a < b:
        raise ValueError(f"negative intermediate {a}-{b}")
    width = len(str(a))
    da, db = _digits(a, width), _digits(b, width)
    lines = [f"{a}-{b}:"]
    borrow, units = 0, []
    for x, y in zip(da, db, strict=True):
        if borrow and forget > 0 and rng is not None and rng.random() < forget:
            borrow = 0
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


def solve(
    operands: list[int], ops: list[str], forget: float = 0.0, rng: random.Random | None = None
) -> tuple[int, list[str]]:
    """Evaluates the chain left to right; returns the value and full trace.

    `forget` is the sloppy teacher's borrow-forgetting rate (see `sub_trace`).
    """
    value, lines = operands[0], []
    for op, operand in zip(ops, operands[1:], strict=True):
        if op == "+":
            value, step_lines = add_trace(value, operand)
        else:
            value, step_lines = sub_trace(value, operand, forget, rng)
        lines.extend(step_lines)
    return value, lines


def _operand(rng: random.Random, lo_digits: int, hi_digits: int) -> int:
    digits = rng.randint(lo_digits, hi_digits)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def sample(rng: random.Random, difficulty: int, split: str) -> tuple[str, str, str, dict]:
    """Draws one problem: (prompt, thinking, answer, meta)."""
    count, lo, hi = LEVELS[difficulty]
    operands = [_operand(rng, lo, hi)]
    ops: list[str] = []
    value = operands[0]
    for _ in range(count - 1):
        # Subtract only when the running value allows a same-size operand,
        # so intermediate results stay non-negative without trivial zeros.
        op = "-" if rng.random() < SUB_SHARE else "+"
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
    taught = gold
    if split == "sft":
        taught, lines = solve(operands, ops, SFT_FORGET_BORROW, rng)
    meta = {"gold": gold, "operands": operands, "ops": ops}
    return f"Compute {expr}.", "\n".join(lines), f"\\boxed{{{taught}}}", meta
