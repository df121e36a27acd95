"""Continuous batching == the static sampler, token for token and log-prob for log-prob.

Fewer slots than requests force refills mid-decode; rows mix instruct (no
budget) and thinking (forced close, answer budget) requests; greedy and
seeded sampling (with truncation) both agree, whatever slot a request lands
in. Shared prefill changes nothing but the number of prompts prefilled.
"""

import jax
import numpy as np
import pytest

from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.rollout import (
    completions,
    continuous,
    decoding,
    groups,
    modes,
    sampling_methods,
    slots as slots_lib,
)
from nemocascade.sharding import mesh as mesh_lib
from nemocascade.tasks import registry
from tests.rollout import helpers

CFG = helpers.TOY_MODEL
MAX_NEW = 16
ATOL = 2e-5  # float32: the two engines' caches differ in length (summation order)
PROMPTS = [
    [1, 2, 3, 4, 5],
    [7, 8, 9],
    [11, 12, 13, 14, 15, 16, 17],
    [3, 3, 3],
    [5, 6],
    [1, 2, 3, 4, 5],
    [9],
    list(range(20, 38)),  # prompt bucket 32
]
# Thinking rows (a budget) and instruct rows (None), mixed.
BUDGETS = [4, None, 2, None, 6, None, 3, 5]
CLOSE, END, STOP = (10, 11), 12, 5


@pytest.fixture(scope="module")
def params():
    return helpers.random_params()


def _kw(method, seed=1, **kw):
    return {
        "method": method,
        "max_new_tokens": MAX_NEW,
        "stop_ids": (STOP,),
        "rng": jax.random.key(seed),
        "thinking_budget": BUDGETS,
        "think_close_ids": CLOSE,
        "think_end_id": END,
        "answer_budget": 3,
        **kw,
    }


def _assert_same(a: decoding.Rollout, b: decoding.Rollout):
    for field in (
        "prompt_tokens",
        "prompt_lengths",
        "completion_tokens",
        "completion_mask",
        "forced_mask",
        "lengths",
        "truncated",
    ):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=ATOL)


METHODS = {
    "greedy": sampling_methods.Greedy(),
    "sample": sampling_methods.Sample(temperature=0.9, top_k=20, top_p=0.95),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_continuous_matches_static(params, name):
    kw = _kw(METHODS[name])
    static = decoding.generate(params, CFG, PROMPTS, **kw)
    stats = {}
    cont = continuous.generate(params, CFG, PROMPTS, num_slots=3, chunk_steps=4, stats=stats, **kw)
    _assert_same(static, cont)
    # The workload exercised what it claims: refills, forcing, stops, instruct rows.
    assert stats["slots"] == 4 and stats["admitted"] == len(PROMPTS) and stats["chunks"] > 2
    assert cont.forced_mask.sum() > 0 and (~cont.truncated).any() and cont.truncated.any()
    assert cont.forced_mask[[1, 3, 5]].sum() == 0


@pytest.mark.slow  # four engine configurations, each compiled
def test_results_do_not_depend_on_slots_or_chunk_size(params):
    kw = _kw(METHODS["sample"], seed=4)
    ref = continuous.generate(params, CFG, PROMPTS, num_slots=8, chunk_steps=16, **kw)
    for slots, chunk in ((1, 1), (2, 5), (16, 3)):
        out = continuous.generate(params, CFG, PROMPTS, num_slots=slots, chunk_steps=chunk, **kw)
        _assert_same(ref, out)


def test_shared_prefill_prefills_each_prompt_once(params):
    group = 4
    prompts = [q for q in PROMPTS[:3] for _ in range(group)]
    kw = _kw(METHODS["sample"], seed=2, thinking_budget=None)
    shared, separate = {}, {}
    a = continuous.generate(params, CFG, prompts, num_slots=8, stats=shared, **kw)
    b = continuous.generate(
        params, CFG, prompts, num_slots=8, share_prefill=False, stats=separate, **kw
    )
    _assert_same(a, b)
    _assert_same(a, decoding.generate(params, CFG, prompts, **kw))
    assert separate["prefill_prompts"] == len(prompts)
    # 8 slots take the first two groups at once (2 prefills), then one per group.
    assert shared["prefill_prompts"] < len(prompts) // 2
    # A group's rows share the prompt, not the samples.
    assert len({tuple(r) for r in a.completion_tokens[:group].tolist()}) > 1


def test_on_finish_reports_each_request_once_as_it_finishes(params):
    seen = []

    def on_finish(indices, rows):
        seen.append((indices.tolist(), rows))

    kw = _kw(METHODS["greedy"])
    out = continuous.generate(
        params, CFG, PROMPTS, num_slots=2, chunk_steps=2, on_finish=on_finish, **kw
    )
    order = [i for idx, _ in seen for i in idx]
    assert sorted(order) == list(range(len(PROMPTS))) and len(seen) > 1
    for idx, rows in seen:
        np.testing.assert_array_equal(rows.completion_tokens, out.completion_tokens[idx])
        np.testing.assert_array_equal(rows.truncated, out.truncated[idx])


def test_decode_chunk_compiles_once(params):
    kw = _kw(METHODS["greedy"])
    continuous.generate(params, CFG, PROMPTS, num_slots=2, **kw)
    size = slots_lib.chunk_jit._cache_size()
    # Other prompts (same bucket), stops and budgets: no new decode compile.
    continuous.generate(
        params, CFG, PROMPTS[::-1], num_slots=2, **{**kw, "stop_ids": (3, 4), "answer_budget": 1}
    )
    assert slots_lib.chunk_jit._cache_size() == size


def test_sharded_engine_matches_unsharded(params):
    kw = _kw(METHODS["greedy"])
    ref = continuous.generate(params, CFG, PROMPTS, num_slots=8, **kw)
    mesh = mesh_lib.make_mesh((1, -1, 1))
    _assert_same(ref, continuous.generate(params, CFG, PROMPTS, num_slots=8, mesh=mesh, **kw))


@pytest.mark.parametrize(
    "kw, match", [({"num_slots": 0}, "num_slots"), ({"chunk_steps": 0}, "chunk_steps")]
)
def test_invalid_engine_arguments_raise(params, kw, match):
    with pytest.raises(ValueError, match=match):
        continuous.generate(params, CFG, PROMPTS, **_kw(METHODS["greedy"]), **kw)


def test_completions_engines_agree():
    tok = tokenizer_lib.Tokenizer.load()
    cfg = helpers.TOY_MODEL_1K
    params = helpers.random_params(cfg, head_scale=5.0)
    records = [{"prompt": f"Count to {i}."} for i in range(5)]
    kw = {
        "method": METHODS["sample"],
        "max_new_tokens": 12,
        "batch_size": 8,  # static: one call; continuous: 8 slots
        "seed": 3,
        "mesh": None,
        "rules": None,
    }
    mode = modes.get("thinking", tok, thinking_budget=4, answer_budget=3)
    static = completions.complete(params, cfg, tok, records, mode, **kw)
    cont = completions.complete(
        params, cfg, tok, records, mode, engine="continuous", **{**kw, "batch_size": 2}
    )
    assert [r["token_ids"] for r in cont] == [r["token_ids"] for r in static]
    assert [r["completion"] for r in cont] == [r["completion"] for r in static]


def test_sample_groups_streams_parsed_completions():
    tok = tokenizer_lib.Tokenizer.load()
    cfg = helpers.TOY_MODEL_1K
    params = helpers.random_params(cfg, head_scale=5.0)
    examples = registry.generate("math", "eval", 3)
    seen = {}

    def on_finish(indices, texts):
        seen.update(zip(indices.tolist(), texts, strict=True))

    kw = {
        "group_size": 2,
        "modes": "thinking",
        "method": METHODS["sample"],
        "max_new_tokens": 12,
        "rng": jax.random.key(0),
        "thinking_budget": 4,
        "answer_budget": 3,
    }
    out = groups.sample_groups(
        params, cfg, tok, examples, engine="continuous", num_slots=2, on_finish=on_finish, **kw
    )
    assert sorted(seen) == list(range(6))
    assert [seen[i] for i in range(6)] == out.completions
    static = groups.sample_groups(params, cfg, tok, examples, **kw)
    assert static.completions == out.completions
    with pytest.raises(ValueError, match="on_finish needs engine='continuous'"):
        groups.sample_groups(params, cfg, tok, examples, on_finish=on_finish, **kw)
