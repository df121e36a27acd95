"""Bradley–Terry loss, gradient and accuracy against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.losses import reward_model

CHOSEN = jnp.array([1.0, 0.0, 2.0, -1.0])
REJECTED = jnp.array([1.0, 1.0, 0.0, -3.0])  # Δ = 0, −1, 2, 2


def test_loss_and_accuracy():
    num, den, metrics = reward_model.bradley_terry_loss(CHOSEN, REJECTED)
    # log 2 + log(1+e) + 2·log(1+e^−2)
    np.testing.assert_allclose(num, 0.69314718 + 1.31326169 + 2 * 0.12692801, rtol=1e-6)
    assert float(den) == 4.0
    # The tie counts as wrong.
    assert tuple(map(float, metrics["accuracy"])) == (2.0, 4.0)
    assert tuple(map(float, metrics["delta"])) == (3.0, 4.0)


def test_margin():
    num, _, metrics = reward_model.bradley_terry_loss(CHOSEN, REJECTED, margin=1.0)
    # Δ − 1 = −1, −2, 1, 1: log(1+e) + log(1+e²) + 2·log(1+e^−1)
    np.testing.assert_allclose(num, 1.31326169 + 2.12692801 + 2 * 0.31326169, rtol=1e-6)
    assert float(metrics["accuracy"][0]) == 2.0  # accuracy ignores the margin
    per_pair = reward_model.bradley_terry_loss(
        CHOSEN, REJECTED, margin=jnp.array([0.0, 0.0, 1.0, 1.0])
    )[0]
    np.testing.assert_allclose(per_pair, 0.69314718 + 1.31326169 + 2 * 0.31326169, rtol=1e-6)


def test_gradient_at_tie_is_half():
    def loss(rc, rr):
        return reward_model.bradley_terry_loss(rc, rr)[0]

    gc, gr = jax.grad(loss, argnums=(0, 1))(jnp.array([0.3]), jnp.array([0.3]))
    np.testing.assert_allclose(loss(jnp.array([0.3]), jnp.array([0.3])), np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(gc, [-0.5], rtol=1e-6)
    np.testing.assert_allclose(gr, [0.5], rtol=1e-6)


def test_extreme_scores_are_finite():
    rc = jnp.array([200.0, -200.0])
    rr = jnp.zeros(2)
    num, _, _ = reward_model.bradley_terry_loss(rc, rr)
    np.testing.assert_allclose(num, 200.0, rtol=1e-6)
    g = jax.grad(lambda x: reward_model.bradley_terry_loss(x, rr)[0])(rc)
    np.testing.assert_allclose(g, [0.0, -1.0], atol=1e-6)


def test_mask_drops_padding_pairs():
    rc = jnp.array([0.0, jnp.nan])
    rr = jnp.array([0.0, 5.0])
    num, den, metrics = reward_model.bradley_terry_loss(rc, rr, mask_b=jnp.array([1, 0]))
    np.testing.assert_allclose(num, np.log(2.0), rtol=1e-6)
    assert float(den) == 1.0
    assert float(metrics["accuracy"][0]) == 0.0
    g = jax.grad(lambda x: reward_model.bradley_terry_loss(x, rr, mask_b=jnp.array([1, 0]))[0])(rc)
    np.testing.assert_allclose(g, [-0.5, 0.0])


def test_micro_batch_exactness():
    rc = jax.random.normal(jax.random.key(0), (6,))
    rr = jax.random.normal(jax.random.key(1), (6,))
    num, den, _ = reward_model.bradley_terry_loss(rc, rr)
    n1, d1, _ = reward_model.bradley_terry_loss(rc[:3], rr[:3])
    n2, d2, _ = reward_model.bradley_terry_loss(rc[3:], rr[3:])
    np.testing.assert_allclose(n1 + n2, num, rtol=1e-6)
    assert float(d1 + d2) == float(den)
