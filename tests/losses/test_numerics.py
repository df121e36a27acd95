"""The log-ratio clamp of the policy loss and the k3 bound, against hand values."""

import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.losses import kl, policy


def test_k3_is_bounded_at_log_ratio_15():
    # log r = log π_ref − log π_θ = 15: clamp → 10, k3 = e¹⁰ − 11 = 22,015.47 → bound 10.
    logp, ref = jnp.array([0.0]), jnp.array([15.0])
    np.testing.assert_allclose(kl.kl_estimate(logp, ref, bound=None), [np.exp(10.0) - 11.0])
    assert float(kl.kl_estimate(logp, ref)[0]) == 10.0
    # Below the bound k3 is untouched: log r = 2 → e² − 3 = 4.389.
    np.testing.assert_allclose(kl.kl_estimate(logp, jnp.array([2.0])), [np.exp(2.0) - 3.0])
    # The KL loss term sees the bounded value; no gradient where the bound binds.
    mask = jnp.array([[1, 1]])
    num, den = kl.kl_penalty(jnp.array([[0.0, 0.0]]), jnp.array([[15.0, 2.0]]), mask)
    np.testing.assert_allclose([num, den], [10.0 + np.exp(2.0) - 3.0, 2.0], rtol=1e-6)
    g = jax.grad(lambda lp: kl.kl_penalty(lp, jnp.array([[15.0, 2.0]]), mask)[0])(
        jnp.array([[0.0, 0.0]])
    )
    np.testing.assert_allclose(g, [[0.0, 1.0 - np.exp(2.0)]], rtol=1e-6)


def test_policy_ratio_clamped_before_exp():
    # log π_θ − log π_old = 100 would overflow float32 (e¹⁰⁰); clamped to 20.
    logp = jnp.array([[100.0, -100.0, 1.0]])
    old = jnp.zeros((1, 3))
    adv = jnp.array([1.0])
    mask = jnp.ones((1, 3), jnp.int32)
    num, den, m = policy.policy_loss(logp, old, adv, mask, clip=False)
    expected = -(np.exp(20.0, dtype=np.float32) + np.exp(-20.0) + np.exp(1.0))
    np.testing.assert_allclose(float(num), expected, rtol=1e-6)
    assert float(den) == 3.0
    ratio_sum, _ = m["ratio_mean"]
    assert np.isfinite(float(ratio_sum))
    # k3 metric from the clamped log-ratios: (e²⁰ − 21) + (e⁻²⁰ + 19) + (e − 2).
    np.testing.assert_allclose(
        float(m["approx_kl"][0]),
        (np.exp(20.0) - 21.0) + (np.exp(-20.0) + 19.0) + (np.exp(1.0) - 2.0),
        rtol=1e-6,
    )
    # Gradient: 0 where the clamp binds, −A·r for the free token.
    g = jax.grad(lambda lp: policy.policy_loss(lp, old, adv, mask, clip=False)[0])(logp)
    np.testing.assert_allclose(g, [[0.0, 0.0, -np.exp(1.0)]], rtol=1e-6)
    assert policy.LOG_RATIO_CLAMP == 20.0
