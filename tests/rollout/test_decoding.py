"""Sampler invariants: cached decode == full forward, padding/batch independence,
stops, the thinking budget, bounded compiles, sharded == unsharded."""

import jax
import numpy as np
import pytest

from nemocascade.model import transformer
from nemocascade.rollout import decoding, sampling_methods
from nemocascade.sharding import hosts, mesh as mesh_lib
from tests.rollout import helpers

CFG = helpers.TOY_MODEL
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [11, 12, 13, 14, 15, 16, 17]]
MAX_NEW = 16
ATOL = 2e-5  # float32: cached vs full attention differ only in summation order


@pytest.fixture(scope="module")
def params():
    return helpers.random_params()


def _greedy(params, prompts, **kw):
    kw = {"stop_ids": (), "max_new_tokens": MAX_NEW, **kw}
    return decoding.generate(
        params, CFG, prompts, method=sampling_methods.Greedy(), rng=jax.random.key(0), **kw
    )


@pytest.fixture(scope="module")
def free(params):
    return _greedy(params, PROMPTS)


def _full_forward_logits(params, rollout):
    """[N, P+M, V] logits of one uncached forward over prompt + completion (test oracle)."""
    tokens = np.concatenate([rollout.prompt_tokens, rollout.completion_tokens], axis=1)
    pad = rollout.prompt_tokens.shape[1] - rollout.prompt_lengths
    slots = np.arange(tokens.shape[1])[None]
    segments = (slots >= pad[:, None]).astype(np.int32)
    positions = np.maximum(slots - pad[:, None], 0)
    hidden, _ = transformer.Transformer(CFG).apply({"params": params}, tokens, positions, segments)
    return np.asarray(hidden @ transformer.unembedding(params, CFG))


def test_cached_decode_matches_full_forward_at_every_step(params, free):
    logits = _full_forward_logits(params, free)
    p = free.prompt_tokens.shape[1]
    step_logits = logits[:, p - 1 : p - 1 + MAX_NEW]  # predicts completion token j
    np.testing.assert_array_equal(free.completion_tokens, step_logits.argmax(-1))
    logp = jax.nn.log_softmax(step_logits, axis=-1)
    ref = np.take_along_axis(np.asarray(logp), free.completion_tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(free.logprobs, ref, atol=ATOL)
    assert np.all(free.lengths == MAX_NEW) and np.all(free.truncated)
    assert free.prompt_tokens.shape == (3, decoding.MIN_PROMPT_BUCKET)


def test_results_independent_of_padding_and_batch_composition(params, free):
    alone = _greedy(params, PROMPTS[:1])
    long_prompt = list(range(20, 40))  # pushes the prompt bucket from 16 to 32
    mixed = _greedy(params, [PROMPTS[2], long_prompt, PROMPTS[0]])
    assert mixed.prompt_tokens.shape[1] == 32
    for other, row in ((alone, 0), (mixed, 2)):
        np.testing.assert_array_equal(other.completion_tokens[row], free.completion_tokens[0])
        np.testing.assert_allclose(other.logprobs[row], free.logprobs[0], atol=ATOL)
    np.testing.assert_array_equal(mixed.completion_tokens[0], free.completion_tokens[2])


def test_stop_token_ends_each_row_and_pads_after(params, free):
    row0 = free.completion_tokens[0].tolist()
    j = next(j for j in range(2, MAX_NEW) if row0[j] not in row0[:j])
    stop = row0[j]
    out = _greedy(params, PROMPTS, stop_ids=(stop,))
    for i, tokens in enumerate(free.completion_tokens.tolist()):
        end = tokens.index(stop) + 1 if stop in tokens else MAX_NEW
        assert out.lengths[i] == end
        assert bool(out.truncated[i]) == (stop not in tokens)
        np.testing.assert_array_equal(out.completion_tokens[i, :end], tokens[:end])
        np.testing.assert_array_equal(out.completion_mask[i], np.arange(MAX_NEW) < end)
        assert np.all(out.completion_tokens[i, end:] == 0) and np.all(out.logprobs[i, end:] == 0)
    assert out.lengths[0] == j + 1 and not out.truncated[0]


def test_thinking_budget_forces_close_then_model_answers(params, free):
    row0 = free.completion_tokens[0].tolist()
    end_id = next(t for t in range(CFG.vocab_size) if t not in row0[:4])
    close = (10, end_id, 10, 10)
    budget, answer = 4, 3
    out = _greedy(
        params,
        PROMPTS,
        thinking_budget=[budget, None, None],
        answer_budget=answer,
        think_close_ids=close,
        think_end_id=end_id,
    )
    total = budget + len(close) + answer
    assert out.lengths.tolist() == [total, MAX_NEW, MAX_NEW]
    assert out.truncated.tolist() == [True, True, True]
    np.testing.assert_array_equal(out.completion_tokens[0, :budget], row0[:budget])
    np.testing.assert_array_equal(out.completion_tokens[0, budget : budget + 4], close)
    forced = np.zeros(MAX_NEW, np.int32)
    forced[budget : budget + 4] = 1
    np.testing.assert_array_equal(out.forced_mask[0], forced)
    # Rows without a budget are untouched by their neighbour's forcing.
    np.testing.assert_array_equal(out.completion_tokens[1:], free.completion_tokens[1:])
    assert out.forced_mask[1:].sum() == 0
    # After the forced close the model answers: greedy choices given the forced prefix.
    logits = _full_forward_logits(params, out)
    p = out.prompt_tokens.shape[1]
    answer_steps = range(budget + 4, total)
    np.testing.assert_array_equal(
        out.completion_tokens[0, budget + 4 : total],
        [logits[0, p - 1 + j].argmax() for j in answer_steps],
    )


def test_natural_think_close_prevents_forcing(params, free):
    row0 = free.completion_tokens[0].tolist()
    end_id = row0[1]  # the model closes the block itself at step 1
    out = _greedy(
        params, PROMPTS[:1], thinking_budget=4, think_close_ids=(10, end_id), think_end_id=end_id
    )
    assert out.forced_mask.sum() == 0
    np.testing.assert_array_equal(out.completion_tokens[0], row0)


def test_same_buckets_do_not_recompile(params, free):
    size = decoding._decode_jit._cache_size()  # `free` compiled batch 4 x prompt 16
    # Other prompts, batch size, stop ids and budgets within the same buckets.
    again = _greedy(
        params,
        [[9, 8, 7, 6, 5, 4, 3], [1], [2, 3], [4]],
        stop_ids=(3, 4),
        thinking_budget=2,
        think_close_ids=(1, 2, 3),
        think_end_id=2,
    )
    assert decoding._decode_jit._cache_size() == size
    assert again.forced_mask.sum() > 0
    _greedy(params, [list(range(1, 40)), [1]])  # prompt bucket 64: one more compile
    assert decoding._decode_jit._cache_size() == size + 1


def test_sharded_decode_matches_unsharded(params, free):
    mesh = mesh_lib.make_mesh((1, -1, 1))
    out = _greedy(params, PROMPTS, mesh=mesh)
    np.testing.assert_array_equal(out.completion_tokens, free.completion_tokens)
    np.testing.assert_allclose(out.logprobs, free.logprobs, atol=ATOL)


def test_sampled_rows_differ_and_logprobs_are_finite(params):
    out = decoding.generate(
        params,
        CFG,
        [PROMPTS[0]] * 3,
        method=sampling_methods.Sample(temperature=1.0, top_k=20, top_p=0.95),
        max_new_tokens=MAX_NEW,
        stop_ids=(),
        rng=jax.random.key(3),
    )
    assert len({tuple(r) for r in out.completion_tokens.tolist()}) > 1
    assert np.all(np.isfinite(out.logprobs)) and np.all(out.logprobs <= 0)


@pytest.mark.parametrize(
    "prompts, kw, match",
    [
        ([[1], []], {}, "empty prompt"),
        ([[1] * 60], {}, "max_seq_len"),
        ([[1]], {"thinking_budget": 3}, "think_close_ids"),
        ([[1]], {"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_invalid_requests_raise(params, prompts, kw, match):
    with pytest.raises(ValueError, match=match):
        _greedy(params, prompts, **kw)


def test_bucket_sizes():
    assert [decoding.prompt_bucket(n) for n in (1, 16, 17, 64, 65)] == [16, 16, 32, 64, 128]
    assert [hosts.pow2_bucket(n) for n in (1, 3, 4, 5)] == [1, 4, 4, 8]
    assert hosts.pow2_bucket(3, multiple=8) == 8 and hosts.pow2_bucket(9, 8) == 16
