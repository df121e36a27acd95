"""Math answers against gold strings, scored as math-verify scores them, in bounded time."""

import time
import types

import numpy as np
import pytest

from nemocascade import config as config_lib
from nemocascade.rewards import math_answer, pool as pool_lib, verifiers
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer.onpolicy import rewarders

# (model answer, gold string, math-verify's verdict)
PAIRS = [
    ("\\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", True),
    ("\\boxed{(0,1]}", "(0,1]", True),
    ("\\boxed{42}", "42", True),
    ("The answer is \\boxed{42}.", "42", True),
    ("\\boxed{41}", "42", False),
    ("\\boxed{[0,1)}", "(0,1]", False),
    ("\\boxed{(0,1)}", "(0,1]", False),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", True),
    ("\\boxed{0.75}", "\\frac{3}{4}", True),
    ("\\boxed{3/4}", "\\frac{3}{4}", True),
    ("\\boxed{\\frac{4}{3}}", "\\frac{3}{4}", False),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", True),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}", False),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", True),
    ("\\boxed{\\{1,3\\}}", "\\{1,2\\}", False),
    ("\\boxed{x=3}", "3", True),
    ("\\boxed{3}", "x=3", True),
    ("\\boxed{-7}", "-7", True),
    ("\\boxed{7}", "-7", False),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{1000.0}", "1000", True),
    ("\\boxed{\\pi}", "\\pi", True),
    ("\\boxed{3.14}", "\\pi", False),
    ("\\boxed{2\\pi}", "2\\pi", True),
    ("\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}", True),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
    ("\\boxed{x^2+1}", "(x+1)^2", False),
    ("\\boxed{\\text{Monday}}", "\\text{Monday}", True),
    ("\\boxed{10\\%}", "10", True),  # math-verify drops the percent sign
    ("\\boxed{5\\text{ cm}}", "5", True),  # and units
    ("\\boxed{\\$18}", "18", True),
    ("\\boxed{18}", "\\$18", True),
    ("\\boxed{e^{i\\pi}}", "-1", False),  # math-verify does not evaluate Euler's identity
    ("\\boxed{(1,2)}", "(1,2)", True),
    ("\\boxed{(2,1)}", "(1,2)", False),
    ("\\boxed{\\infty}", "\\infty", True),
    ("\\boxed{(-\\infty, 0)}", "(-\\infty,0)", True),
    ("\\boxed{2} first, then \\boxed{3}", "3", True),  # the last box counts
    ("\\boxed{3} first, then \\boxed{2}", "3", False),
    ("\\boxed{\\frac{1}{3}}", "0.3333333", True),
    ("\\boxed{0.33}", "\\frac{1}{3}", False),
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ("\\boxed{\\log_2 8}", "3", True),
    ("\\boxed{2^{10}}", "1024", True),
    ("\\boxed{\\binom{5}{2}}", "10", True),
    ("\\boxed{\\frac{1}{2}}", "Half of it: \\boxed{\\frac{1}{2}}", True),  # boxed gold solution
    ("\\boxed{18}", "She pays 3*6 = 18 dollars.\n#### 18", True),  # GSM8K gold solution
    ("no box here, 42", "42", False),
    ("\\fbox{42}", "42", True),
    ("\\boxed 5", "5", True),
]


def test_table_has_at_least_40_pairs_both_ways():
    assert len(PAIRS) >= 40
    assert {expected for _, _, expected in PAIRS} == {True, False}


@pytest.mark.parametrize(("answer", "gold", "expected"), PAIRS)
def test_pair(answer, gold, expected):
    ok, info = math_answer.check(answer, gold)
    assert ok is expected, info


@pytest.mark.parametrize(
    ("text", "fallback", "expected"),
    [
        ("so the total is 18.\n#### 18", "gsm8k", "18"),
        ("#### 5\nlater #### 7", "gsm8k", "7"),
        ("no marker 18", "gsm8k", None),
        ("It costs 1,250 dollars, then 3.5 more", "last_number", "3.5"),
        ("We get 12 and then 1,250", "last_number", "1250"),
        ("\\boxed{9} wins over #### 7", "gsm8k", "9"),  # a box always comes first
        ("no box", "none", None),
        ("a \\boxed{\\frac{1}{\\sqrt{2}}} b", "none", "\\frac{1}{\\sqrt{2}}"),
        ("unbalanced \\boxed{\\frac{1}{2}", "none", None),
    ],
)
def test_extract(text, fallback, expected):
    assert math_answer.extract(text, fallback) == expected


def test_fallbacks_score():
    assert math_answer.check("so 18.\n#### 18", "18", fallback="gsm8k")[0]
    assert not math_answer.check("so 18.\n#### 18", "18")[0]
    assert math_answer.check("the final answer is $\\frac{1}{2}$", "0.5", fallback="math_verify")[0]
    assert math_answer.check("we find 3 apples and 7 pears", "7", fallback="last_number")[0]
    with pytest.raises(ValueError, match="fallback 'boxed'"):
        math_answer.extract("x", "boxed")


def test_pathological_expression_is_cut_at_the_deadline():
    start = time.monotonic()
    ok, info = math_answer.check("\\boxed{9^{9^{9^{9}}}}", "1", timeout_s=0.5)
    assert not ok and "timeout" in info["error"]
    assert time.monotonic() - start < 10.0  # unbounded without the deadline
    assert math_answer.check("\\boxed{2}", "2", timeout_s=0.5)[0]  # the alarm is cleared


def _ex(meta, prompt="Solve it."):
    return tasks_base.Example("u", "math", 0, prompt, "", "", meta)


@pytest.mark.parametrize(
    ("completion", "meta", "score"),
    [
        ("<think>\nhalf\n</think>\n\n\\boxed{0.5}", {"answer": "\\frac{1}{2}"}, 1.0),
        ("<think>\n\\boxed{0.5}", {"answer": "\\frac{1}{2}"}, 0.0),  # unfinished thinking
        ("<think>\\boxed{0.5}</think>\n\n0.5", {"answer": "\\frac{1}{2}"}, 0.0),  # box in think
        ("\\boxed{405}", {"gold": 405}, 1.0),  # the task world's integer path stays
        ("\\boxed{405.0}", {"gold": 405}, 0.0),
        ("so #### 18", {"answer": "18", "answer_fallback": "gsm8k"}, 1.0),
    ],
)
def test_verifier_dispatch(completion, meta, score):
    assert verifiers.math("", completion, _ex(meta)).score == score


def test_payload_error_names_the_key():
    assert verifiers.payload_error("math", {"answer": "1/2"}) is None
    assert verifiers.payload_error("math", {"gold": 3}) is None
    assert "'answer'" in verifiers.payload_error("math", {})
    assert "'answer'" in verifiers.payload_error("math", {"answer": 3})
    assert "'answer_fallback'" in verifiers.payload_error(
        "math", {"answer": "3", "answer_fallback": "boxed"}
    )
    with pytest.raises(ValueError, match="'answer'"):
        verifiers.math("", "\\boxed{1}", _ex({"solution": "1"}))


def test_rl_rewarder_scores_latex_records_nonzero_where_right():
    """A math RL stage's rewarder on LaTeX-answer records with a scripted policy output."""
    golds = ["\\frac{3}{4}", "(0,1]", "\\sqrt{2}", "18"]
    examples = [_ex({"answer": g}, f"Problem {i}") for i, g in enumerate(golds)]
    outputs = [  # two samples per prompt: right, then wrong
        ("<think>\nok\n</think>\n\n\\boxed{0.75}", "\\boxed{0.7}"),
        ("\\boxed{(0, 1]}", "\\boxed{[0,1]}"),
        ("<think>\nr\n</think>\n\n\\boxed{\\sqrt{2}}", "<think>\nnever closed \\boxed{\\sqrt{2}}"),
        ("\\boxed{18}", "\\boxed{81}"),
    ]
    rollouts = types.SimpleNamespace(
        example_index=np.repeat(np.arange(len(golds)), 2),
        completions=[c for pair in outputs for c in pair],
    )
    rewarder = rewarders.VerifierRewarder(config_lib.RLConfig(verifier_workers=0))
    try:
        scores = rewarder(examples, rollouts)
    finally:
        rewarder.close()
    np.testing.assert_array_equal(scores, [1, 0] * len(golds))


def test_pool_survives_a_pathological_answer():
    examples = [_ex({"answer": "1"}), _ex({"answer": "\\frac{1}{2}"})]
    completions = ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{0.5}"]
    with pool_lib.VerifierPool(num_workers=1, timeout_s=8.0) as pool:
        results = pool.score(["math", "math"], ["", ""], completions, examples)
    assert [r.score for r in results] == [0.0, 1.0]
    assert "timeout" in results[0].info["error"]
