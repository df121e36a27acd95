"""KL estimators, the KL loss term and KL-in-reward against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.losses import kl

LN2 = 0.69314718
# Token 0: π_θ = 1/2, π_ref = 1/4. Token 1: π_θ = 1/4, π_ref = 1/2. Token 2: far off.
LOGP = jnp.log(jnp.array([0.5, 0.25, 1.0]))
REF = jnp.array([np.log(0.25), np.log(0.5), -30.0])


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # k1 = log π_θ − log π_ref
        ("k1", [LN2, -LN2, 10.0]),
        # k2 = ½ (log π_θ − log π_ref)²
        ("k2", [0.5 * LN2**2, 0.5 * LN2**2, 50.0]),
        # k3 = π_ref/π_θ − 1 − log(π_ref/π_θ): 1/2 − 1 + ln 2, 2 − 1 − ln 2, e^−10 − 1 + 10
        ("k3", [LN2 - 0.5, 1.0 - LN2, 9.0000454]),
    ],
)
def test_estimators_with_clamp(kind, expected):
    np.testing.assert_allclose(kl.kl_estimate(LOGP, REF, kind=kind), expected, rtol=1e-6)


def test_clamp_none_and_custom():
    np.testing.assert_allclose(kl.kl_estimate(LOGP, REF, kind="k1", clamp=None)[2], 30.0)
    np.testing.assert_allclose(
        kl.kl_estimate(LOGP, REF, kind="k3", clamp=None, bound=None)[2], 29.0
    )
    assert float(kl.kl_estimate(LOGP, REF, kind="k3", clamp=None)[2]) == kl.K3_BOUND
    np.testing.assert_allclose(kl.kl_estimate(LOGP, REF, kind="k2", clamp=2.0)[2], 2.0)
    # The clamp binds ⇒ no gradient through that token.
    g = jax.grad(lambda lp: kl.kl_estimate(lp, REF, kind="k3").sum())(LOGP)
    assert float(g[2]) == 0.0
    # ∂k3/∂log π_θ = 1 − π_ref/π_θ: 1 − 1/2 and 1 − 2.
    np.testing.assert_allclose(g[:2], [0.5, -1.0], rtol=1e-6)


def test_estimators_vanish_at_reference():
    for kind in kl.KINDS:
        np.testing.assert_array_equal(kl.kl_estimate(LOGP, LOGP, kind=kind), np.zeros(3))
    with pytest.raises(ValueError, match="kind"):
        kl.kl_estimate(LOGP, REF, kind="k4")


LOGP_BT = jnp.array([[np.log(0.5), np.log(0.25), np.nan], [np.log(0.25), 0.0, 0.0]])
REF_BT = jnp.array([[np.log(0.25), np.log(0.5), 0.0], [np.log(0.5), -np.inf, 0.0]])
MASK_BT = jnp.array([[1, 1, 0], [1, 0, 0]])


def test_kl_penalty_aggregations_and_padding():
    # k3 on valid tokens: seq0 [ln2 − ½, 1 − ln2], seq1 [1 − ln2].
    num, den = kl.kl_penalty(LOGP_BT, REF_BT, MASK_BT)
    np.testing.assert_allclose(num, (LN2 - 0.5) + 2 * (1 - LN2), rtol=1e-6)
    assert float(den) == 3.0
    num, den = kl.kl_penalty(LOGP_BT, REF_BT, MASK_BT, kind="k1", aggregation="seq_mean_token_mean")
    np.testing.assert_allclose(num, 0.0 + -LN2, rtol=1e-6, atol=1e-7)
    assert float(den) == 2.0
    g = jax.grad(lambda lp: kl.kl_penalty(lp, REF_BT, MASK_BT, kind="k2")[0])(LOGP_BT)
    # ∂k2/∂log π_θ = log π_θ − log π_ref on valid tokens, 0 on padding.
    np.testing.assert_allclose(g, [[LN2, -LN2, 0.0], [-LN2, 0.0, 0.0]], rtol=1e-6)


def test_kl_penalty_micro_batch_exactness():
    k1, k2 = jax.random.split(jax.random.key(0))
    logp = -jnp.abs(jax.random.normal(k1, (4, 5)))
    ref = -jnp.abs(jax.random.normal(k2, (4, 5)))
    mask = (jnp.arange(5)[None] < jnp.array([5, 0, 2, 3])[:, None]).astype(jnp.int32)
    for agg in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum"):
        num, den = kl.kl_penalty(logp, ref, mask, aggregation=agg)
        a = kl.kl_penalty(logp[:2], ref[:2], mask[:2], aggregation=agg)
        b = kl.kl_penalty(logp[2:], ref[2:], mask[2:], aggregation=agg)
        np.testing.assert_allclose(a[0] + b[0], num, rtol=1e-6)
        assert float(a[1] + b[1]) == float(den)


def test_kl_in_reward():
    rewards = jnp.array([1.0, 0.0])
    new, kl_b = kl.kl_in_reward(rewards, LOGP_BT, REF_BT, MASK_BT, coef=0.1)
    # k1 sequence sums: ln2 − ln2 = 0 and −ln2.
    np.testing.assert_allclose(kl_b, [0.0, -LN2], atol=1e-7)
    np.testing.assert_allclose(new, [1.0, 0.1 * LN2], rtol=1e-6)
    new, kl_b = kl.kl_in_reward(rewards, LOGP_BT, REF_BT, MASK_BT, coef=0.5, kind="k3")
    np.testing.assert_allclose(kl_b, [(LN2 - 0.5) + (1 - LN2), 1 - LN2], rtol=1e-6)
    np.testing.assert_allclose(new, [1.0 - 0.25, -0.5 * (1 - LN2)], rtol=1e-6)
    # Stop-gradient: the KL acts only through the reward.
    g = jax.grad(lambda lp: kl.kl_in_reward(rewards, lp, REF_BT, MASK_BT, coef=0.1)[0].sum())(
        LOGP_BT
    )
    np.testing.assert_array_equal(g, np.zeros((2, 3)))
