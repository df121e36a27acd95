"""Tests of the code generator: solutions match their hidden tests."""

import pytest

from nemocascade.tasks import code, registry


@pytest.mark.parametrize("split", ["rl", "eval"])
def test_reference_solutions_pass_all_tests(split):
    for e in registry.generate("code", split, 300, seed=0):
        namespace = {}
        exec(e.answer, namespace)  # trusted generator output
        tests = e.meta["tests"]
        assert len(tests) == code.NUM_TESTS >= 5
        assert all(namespace["f"](x) == y for x, y in tests), e
        assert len({repr(y) for _, y in tests}) > 1  # never a constant function


def test_prompt_shows_the_first_tests():
    e = registry.generate("code", "sft", 1, seed=5)[0]
    shown = [line for line in e.prompt.splitlines() if line.startswith("f(")]
    assert shown == [f"f({x!r}) = {y!r}" for x, y in e.meta["tests"][: code.NUM_SHOWN]]
    assert e.answer.startswith("def f(x):\n    return ")


def test_trace_ends_with_the_solution_check():
    for e in registry.generate("code", "rl", 100, seed=0):
        last = e.thinking.splitlines()[-1]
        assert last.startswith(f"try {e.meta['solution']}: ")
        assert last.count(" ok") == code.NUM_SHOWN
        # A wrong first try, when present, really fails.
        if e.thinking.count("\n"):
            assert e.thinking.splitlines()[0].endswith(" no")


def test_depth_grows_with_difficulty():
    def mean_len(level):
        examples = registry.generate("code", "eval", 200, seed=0, difficulty=level)
        return sum(len(e.meta["solution"]) for e in examples) / len(examples)

    assert mean_len(1) < mean_len(2)
    assert mean_len(1) < mean_len(3)


def test_sft_teacher_hardcodes_the_shown_examples_at_the_set_rate():
    examples = registry.generate("code", "sft", 1000, seed=0)
    copied = [e for e in examples if e.thinking.startswith("copy")]
    assert abs(len(copied) / len(examples) - code.SFT_HARDCODE_RATE) < 0.05
    for e in examples:
        namespace = {}
        exec(e.answer, namespace)  # trusted generator output
        tests = e.meta["tests"]
        assert all(namespace["f"](x) == y for x, y in tests[: code.NUM_SHOWN])
        if e not in copied:
            assert all(namespace["f"](x) == y for x, y in tests)

    # The lookup fails at least one hidden test for nearly every problem.
    def passes_all(e):
        namespace = {}
        exec(e.answer, namespace)
        return all(namespace["f"](x) == y for x, y in e.meta["tests"])

    assert sum(passes_all(e) for e in copied) < 0.1 * len(copied)
