"""Tests of the math generator and its column-arithmetic traces."""

import random

import pytest

from nemocascade.tasks import math, registry


def test_add_trace_format():
    value, lines = math.add_trace(347, 58)
    assert value == 405
    assert lines == ["347+58:", "7+8+0=15", "4+5+1=10", "3+0+1=04", "=405"]


def test_sub_trace_format():
    value, lines = math.sub_trace(405, 129)
    assert value == 276
    assert lines == ["405-129:", "15-9-0=6", "10-2-1=7", "4-1-1=2", "=276"]


def test_final_carry_and_zero_result():
    assert math.add_trace(999, 1)[0] == 1000
    assert math.add_trace(999, 1)[1][-2:] == ["9+0+1=10", "=1000"]
    assert math.sub_trace(31, 31) == (0, ["31-31:", "1-1-0=0", "3-3-0=0", "=0"])
    with pytest.raises(ValueError):
        math.sub_trace(3, 4)


def test_traces_agree_with_python_arithmetic():
    rng = random.Random(0)
    for _ in range(2000):
        a, b = rng.randint(0, 9999), rng.randint(0, 9999)
        assert math.add_trace(a, b)[0] == a + b
        hi, lo = max(a, b), min(a, b)
        assert math.sub_trace(hi, lo)[0] == hi - lo


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels(level):
    count, lo, hi = math.LEVELS[level]
    for e in registry.generate("math", "rl", 100, seed=0, difficulty=level):
        operands, ops = e.meta["operands"], e.meta["ops"]
        assert len(operands) == count
        assert all(len(str(x)) <= hi for x in operands)
        assert len(str(operands[0])) >= lo
        value = operands[0]
        for op, x in zip(ops, operands[1:], strict=True):
            value = value + x if op == "+" else value - x
            assert value >= 0
        assert value == e.meta["gold"]
        assert e.answer == f"\\boxed{{{value}}}"
        assert e.thinking.endswith(f"={value}")


def test_sloppy_teacher_forgets_borrows_in_sft_only():
    assert math.sub_trace(405, 129, forget=1.0, rng=random.Random(0)) == (
        386,
        ["405-129:", "15-9-0=6", "10-2-0=8", "4-1-0=3", "=386"],
    )
    sft = registry.generate("math", "sft", 1000, seed=0)
    wrong = [e for e in sft if e.answer != f"\\boxed{{{e.meta['gold']}}}"]
    # Only subtractions with a borrow can go wrong, and the answer follows the trace.
    assert 0.1 < len(wrong) / len(sft) < 0.4
    assert all("-" in e.prompt and e.thinking.endswith(e.answer[7:-1]) for e in wrong)
    assert all(int(e.answer[7:-1]) > e.meta["gold"] for e in wrong)
    for split in ("rl", "eval"):
        for e in registry.generate("math", split, 300, seed=0):
            assert e.answer == f"\\boxed{{{e.meta['gold']}}}"
