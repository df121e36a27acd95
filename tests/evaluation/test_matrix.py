"""Evaluation matrix: keys, value ranges, deterministic examples, scoring of gold answers."""

import json

import numpy as np
import pytest

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.evaluation import matrix
from nemocascade.rollout import modes as modes_lib
from nemocascade.tasks import chat, registry
from tests.rollout import helpers

CFG = helpers.TOY_MODEL_1K
DOMAINS = ("math", "code", "if", "chat")
MODES = ("thinking", "instruct")
MAX_NEW = 12


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


def test_matrix_keys_and_ranges_on_a_toy_model(tok, tmp_path):
    params = helpers.random_params(CFG, head_scale=5.0)
    metrics = matrix.evaluate(
        params,
        CFG,
        tok,
        domains=DOMAINS,
        modes=MODES,
        num_per_domain=3,
        max_new_tokens=MAX_NEW,
        thinking_budget=4,
        batch_size=48,  # one sampler call for greedy, one for the samples
        samples=2,
    )
    expected = {
        f"{d}/{m}/{k}"
        for d in DOMAINS
        for m in MODES
        for k in ("pass@1", "mean_len", "truncated", "mean@2") + (("gold",) if d == "chat" else ())
    }
    assert set(metrics) == expected
    for key, value in metrics.items():
        limit = MAX_NEW if key.endswith("mean_len") else 1.0
        assert 0.0 <= value <= limit, (key, value)
    # A random model never closes its turn within 12 tokens.
    assert all(metrics[f"{d}/{m}/truncated"] == 1.0 for d in DOMAINS for m in MODES)
    assert all(metrics[f"{d}/{m}/mean_len"] == MAX_NEW for d in DOMAINS for m in MODES)
    path = tmp_path / "sft" / "eval_matrix.json"
    matrix.write(str(path), "sft", metrics)
    assert json.loads(path.read_text()) == {"stage": "sft", "metrics": metrics}


def test_chunks_are_near_equal_and_bounded():
    chunks = matrix._chunks(list(range(50)), 16)
    assert [len(c) for c in chunks] == [13, 13, 13, 11]
    assert sum(chunks, []) == list(range(50))
    assert matrix._chunks(list(range(5)), 16) == [list(range(5))]


def test_examples_are_deterministic_and_cover_the_split_levels():
    a = matrix.examples_for("math", "eval", 7, seed=3)
    b = matrix.examples_for("math", "eval", 7, seed=3)
    assert [e.uid for e in a] == [e.uid for e in b]
    levels = registry.difficulty_levels("math", "eval")
    counts = [sum(e.difficulty == lv for e in a) for lv in levels]
    assert counts == [3, 2, 2]
    assert len({e.uid for e in a}) == 7


@pytest.mark.parametrize("domain", ["math", "code"])
@pytest.mark.parametrize("mode", MODES)
def test_gold_completions_score_one(tok, domain, mode):
    examples = matrix.examples_for(domain, "eval", 3)
    rows = [modes_lib.get(mode, tok)] * len(examples)
    ids = [tok.encode(chat_template.assistant_target(ex, mode)) for ex in examples]
    scores, swe_terms = matrix._scores(rows, examples, ids)
    np.testing.assert_array_equal(scores, 1.0)
    assert all(np.isnan(v).all() for v in swe_terms.values())  # swe rows only


def test_chat_gold_score_is_the_rubric_value(tok):
    (ex,) = matrix.examples_for("chat", "eval", 1)
    ids = [tok.encode(chat_template.assistant_target(ex, "instruct"))]
    score, _ = matrix._scores([modes_lib.get("instruct", tok)], [ex], ids)
    np.testing.assert_allclose(score, [chat.gold_score(ex, ex.answer)])
