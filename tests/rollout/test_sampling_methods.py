"""Sampling methods on a fixed logit vector: exact greedy, and frequency tests of
temperature, top-k and top-p against the analytically truncated distribution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from nemocascade.rollout import sampling_methods

PROBS = np.array([0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02])
LOGITS = np.log(PROBS).astype(np.float32) + 3.0  # a shift must not matter
DRAWS = 40_000


def _draw(method, seed=0):
    logits = jnp.broadcast_to(jnp.asarray(LOGITS), (DRAWS, LOGITS.size))
    tokens, logp = sampling_methods.choose(logits, method, jax.random.key(seed))
    return np.asarray(tokens), np.asarray(logp)


def _expected(temperature, support):
    p = PROBS ** (1.0 / temperature)
    p = np.where(np.isin(np.arange(p.size), support), p, 0.0)
    return p / p.sum()


@pytest.mark.parametrize(
    "method, support",
    [
        (sampling_methods.Sample(), range(8)),
        (sampling_methods.Sample(temperature=2.0), range(8)),
        (sampling_methods.Sample(top_k=3), [0, 1, 2]),
        # Mass strictly before token i: 0, .30, .50, .65, .77 -> keep 4 for top_p=0.7.
        (sampling_methods.Sample(top_p=0.7), [0, 1, 2, 3]),
        # T=0.5 sharpens to p² ∝ (.09,.04,.0225,.0144,...): top-3 mass before
        # (renormalized within top 5) 0, .51, .74, .86 -> top_p=0.8 keeps 3.
        (sampling_methods.Sample(temperature=0.5, top_k=5, top_p=0.8), [0, 1, 2]),
    ],
)
def test_frequencies_match_truncated_distribution(method, support):
    tokens, logp = _draw(method)
    expected = _expected(method.temperature, list(support))
    counts = np.bincount(tokens, minlength=PROBS.size)
    assert counts[expected == 0].sum() == 0  # nothing outside the kept set
    kept = expected > 0
    chi2 = (((counts - DRAWS * expected) ** 2)[kept] / (DRAWS * expected[kept])).sum()
    assert stats.chi2.sf(chi2, kept.sum() - 1) > 1e-3, (counts, DRAWS * expected)
    # The returned log-prob is that of the distribution actually sampled from.
    np.testing.assert_allclose(logp, np.log(expected[tokens]), atol=1e-5)


def test_top_k_is_applied_before_top_p():
    # Within the top 2 (.6, .4 renormalized) the mass before token 1 is .6 >= .55,
    # so only the argmax survives; top-p on the full distribution would keep 3.
    tokens, logp = _draw(sampling_methods.Sample(top_k=2, top_p=0.55))
    assert set(tokens.tolist()) == {0}
    np.testing.assert_allclose(logp, 0.0, atol=1e-6)


def test_per_row_keys_draw_the_distribution_and_each_row_only_from_its_key():
    logits = np.log(np.array([0.5, 0.0, 0.3, 0.0, 0.2], np.float32))  # zeros: never drawn
    keys = sampling_methods.row_keys(jax.random.key(1), jnp.arange(DRAWS), jnp.zeros(DRAWS, int))
    batch = jnp.broadcast_to(jnp.asarray(logits), (DRAWS, logits.size))
    tokens, _ = sampling_methods.choose(batch, sampling_methods.Sample(), keys)
    counts = np.bincount(np.asarray(tokens), minlength=logits.size)
    assert counts[1] == counts[3] == 0
    expected = DRAWS * np.array([0.5, 0.3, 0.2])
    chi2 = ((counts[[0, 2, 4]] - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(chi2, 2) > 1e-3, counts
    # Row 7's token depends on its own key only, not on the rows beside it.
    alone, _ = sampling_methods.choose(batch[7:8], sampling_methods.Sample(), keys[7:8])
    assert int(alone[0]) == int(tokens[7])


def test_greedy_is_argmax_with_temperature_one_logprob():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(5, 11)).astype(np.float32))
    tokens, logp = sampling_methods.choose(logits, sampling_methods.Greedy(), jax.random.key(0))
    np.testing.assert_array_equal(tokens, np.argmax(logits, axis=-1))
    ref = jax.nn.log_softmax(logits)[np.arange(5), np.argmax(logits, axis=-1)]
    np.testing.assert_allclose(logp, ref, atol=1e-6)


def test_logprob_of_is_untruncated_at_the_sampling_temperature():
    logits = jnp.asarray(LOGITS)[None]
    method = sampling_methods.Sample(temperature=0.5, top_k=1)
    lp = sampling_methods.logprob_of(logits, jnp.array([6]), method)
    np.testing.assert_allclose(lp, np.log(_expected(0.5, range(8))[6]), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs", [dict(temperature=0.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)]
)
def test_invalid_sample_settings_raise(kwargs):
    with pytest.raises(ValueError, match="Sample"):
        sampling_methods.Sample(**kwargs)
