"""Verifier tables: completion -> expected score, including adversarial ones."""

import pytest

from nemocascade.rewards import base, registry
from nemocascade.tasks import base as tasks_base, instruction, registry as tasks_registry

MATH = tasks_base.Example("m", "math", 1, "Compute 347 + 58.", "", "\\boxed{405}", {"gold": 405})


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("", (None, "")),
        ("  just text \n", (None, "just text")),
        ("<think>\nwork\n</think>\n\nanswer", ("work", "answer")),
        ("<think>work</think>", ("work", "")),
        ("<think>\nunfinished work", ("unfinished work", None)),
        ("work</think> answer", ("work", "answer")),
        ("pre <think>a</think> b </think> c", ("a", "b </think> c")),
    ],
)
def test_split_thinking(completion, expected):
    assert base.split_thinking(completion) == expected


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("\\boxed{405}", 1.0),
        ("<think>\n7+8+0=15\n</think>\n\n\\boxed{405}", 1.0),
        ("The answer is \\boxed{ 405 }.", 1.0),  # text around the box is ignored
        ("\\boxed{405} trailing garbage", 1.0),
        ("\\boxed{404}", 0.0),
        ("<think>\\boxed{405}</think>\n\n405", 0.0),  # boxed only inside the think block
        ("<think>\\boxed{405}", 0.0),  # unfinished
        ("<think>\nwork\n</think>", 0.0),  # no answer
        ("\\boxed{405} \\boxed{405}", 0.0),  # two boxes
        ("\\boxed{404} \\boxed{405}", 0.0),
        ("\\boxed{405.0}", 0.0),
        ("\\boxed{four hundred five}", 0.0),
        ("\\boxed{}", 0.0),
        ("\\boxed{" + "9" * 5000 + "}", 0.0),
        ("405", 0.0),
        ("\\boxed{\\boxed{405}}", 0.0),
    ],
)
def test_math_verifier(completion, score):
    assert registry.get("math")("", completion, MATH).score == score


CODE = tasks_base.Example(
    "c",
    "code",
    1,
    "",
    "",
    "",
    {"tests": [[2, 7], [5, 16], [0, 1], [3, 10], [9, 28]], "func_name": "f"},
)


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("def f(x):\n    return x * 3 + 1", 1.0),
        ("<think>\ntry x * 3 + 1: 7 ok\n</think>\n\ndef f(x):\n    return x * 3 + 1", 1.0),
        ("Here:\n```python\ndef f(x):\n    return 3 * x + 1\n```\nDone.", 1.0),
        ("def f(x):\n    return x * 3 + 1 if x < 9 else 0", 0.0),  # fails a hidden test
        ("def f(x):\n    return x * 3", 0.0),
        ("def f(x):\n    return str(x * 3 + 1)", 0.0),  # wrong type
        ("<think>\ndef f(x):\n    return x * 3 + 1\n</think>\n\nno code", 0.0),
        ("<think>\ndef f(x):\n    return x * 3 + 1", 0.0),  # unfinished
        ("def g(x):\n    return x * 3 + 1", 0.0),
        ("def f(x):\n    while True:\n        pass", 0.0),
    ],
)
def test_code_verifier(completion, score):
    result = registry.get("code")("", completion, CODE)
    assert result.score == score
    if result.score == 1.0:
        assert result.info["passed"] == result.info["total"] == 5


IF = tasks_base.Example(
    "i",
    "if",
    2,
    "",
    "",
    "",
    {"constraints": [{"kind": "case", "case": "upper"}, {"kind": "count", "n": 3}]},
)


@pytest.mark.parametrize(
    ("completion", "score", "results"),
    [
        ("WAVE TIDE REEF", 1.0, {"case": True, "count": True}),
        (
            "<think>\nneed: uppercase\n</think>\n\nWAVE TIDE REEF",
            1.0,
            {"case": True, "count": True},
        ),
        ("WAVE TIDE", 0.0, {"case": True, "count": False}),
        ("wave tide reef", 0.0, {"case": False, "count": True}),
        ("<think>WAVE TIDE REEF</think>\n\nwave", 0.0, {"case": False, "count": False}),
        ("<think>WAVE TIDE REEF", 0.0, None),
    ],
)
def test_if_verifier(completion, score, results):
    result = registry.get("if")("", completion, IF)
    assert result.score == score
    assert result.info.get("constraints") == results


def test_chat_gold_scores_only_the_answer():
    example = tasks_registry.generate("chat", "eval", 1, seed=0)[0]
    verifier = registry.get("chat_gold")
    clean = verifier("", example.answer, example).score
    assert clean >= 0.8
    assert verifier("", f"<think>\nplan\n</think>\n\n{example.answer}", example).score == clean
    assert verifier("", f"<think>\n{example.answer}\n</think>\n\n", example).score == 0.0
    assert verifier("", f"<think>\n{example.answer}", example).score == 0.0


@pytest.mark.parametrize("domain", ["math", "code"])
def test_references_pass_in_both_modes(domain):
    # RL/eval references are exact (SFT answers carry the teacher's slips).
    verifier = registry.for_domain(domain)
    for e in tasks_registry.generate(domain, "rl", 40, seed=0):
        assert verifier(e.prompt, e.answer, e).score == 1.0
        thinking = tasks_registry.completion_text(e.thinking, e.answer)
        assert verifier(e.prompt, thinking, e).score == 1.0


def test_if_sft_answers_are_imperfect_as_intended():
    verifier = registry.for_domain("if")
    examples = tasks_registry.generate("if", "sft", 500, seed=1)
    rate = sum(verifier(e.prompt, e.answer, e).score for e in examples) / len(examples)
    # Every request has a forbidden word, slipped in at SFT_FORGET_RATE.
    assert abs(rate - (1 - instruction.SFT_FORGET_RATE)) < 0.06
    for e in tasks_registry.generate("if", "rl", 200, seed=1):
        assert verifier(e.prompt, e.answer, e).score == 1.0


def test_registry_names():
    assert set(registry.names()) == {"math", "code", "if", "chat_gold", "swe", "swe_resolved"}
    assert registry.for_domain("chat") is registry.get("chat_gold")
    with pytest.raises(KeyError, match="valid: math, code, if, chat_gold"):
        registry.get("chat")
    with pytest.raises(KeyError, match="unknown domain"):
        registry.for_domain("poetry")
