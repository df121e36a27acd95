"""MOPD loss against hand values: gated tokens, an all-gated sequence, stop-gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.losses import distill

NAN = float("nan")
# log π_train, log π_inf (sampler), log π_teacher; log ρ = train − sampler.
TRAIN = jnp.array([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.0], [-0.7, -0.9, NAN], [0.0, 0.0, 0.0]])
SAMPLER = jnp.array([[-1.0, -1.5, 0.0], [-1.3, -0.2, -2.5], [-2.0, 0.5, 0.0], [NAN, 0.0, 0.0]])
TEACHER = jnp.array([[-0.5, -1.0, -3.0], [-0.1, -1.5, -1.0], [-0.2, -0.4, 0.0], [0.0, 0.0, 0.0]])
MASK = jnp.array([[1, 1, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]])
# seq0: ρ = 1 (w 1, a 0.5), ρ = e^−0.5 = 0.60653066 (in band, a 1.0)
#       term = (−1·0.5·(−1) − 0.60653066·1·(−2)) / 2 = 0.85653066
# seq1: ρ = e (gated), e^−1 (gated), e^0.5 = 1.64872127 (a 1.0)
#       term = (1.64872127 · 2) / 3 = 1.09914751
# seq2: ρ = e^1.3, e^−1.4: all gated, term 0 but counted.  seq3: no valid token.
NUM = 0.85653066 + 1.09914751


def test_loss_hand_values():
    num, den, metrics = distill.mopd_loss(TRAIN, TEACHER, SAMPLER, MASK)
    np.testing.assert_allclose(num, NUM, rtol=1e-6)
    assert float(den) == 3.0
    assert tuple(map(float, metrics["gated_frac"])) == (4.0, 7.0)
    # a over valid tokens: 0.5, 1.0 | 0.2, −0.3, 1.0 | 0.5, 0.5
    np.testing.assert_allclose(metrics["advantage_mean"], (3.4, 7.0), rtol=1e-6)


def test_gradient_is_weighted_advantage_only():
    """∂(num/den)/∂log π_train = −w·a / (|V(y)| · den); w and a carry no gradient."""
    g = jax.grad(
        lambda lp: (lambda n, d, _: n / d)(*distill.mopd_loss(lp, TEACHER, SAMPLER, MASK))
    )(TRAIN)
    expected = np.zeros((4, 3))
    expected[0, 0] = -1.0 * 0.5 / 2 / 3
    expected[0, 1] = -0.60653066 * 1.0 / 2 / 3
    expected[1, 2] = -1.64872127 * 1.0 / 3 / 3
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)


def test_bounds_are_configurable():
    # Widening the band to [e^−1.5, e^1.5] lets seq1's and seq2's tokens through.
    num, _, metrics = distill.mopd_loss(
        TRAIN, TEACHER, SAMPLER, MASK, ratio_low=np.exp(-1.5), ratio_high=np.exp(1.5)
    )
    assert float(metrics["gated_frac"][0]) == 0.0
    seq1 = (np.e * 0.2 * 0.3 + np.exp(-1.0) * -0.3 * 1.2 + 1.64872127 * 2.0) / 3
    seq2 = (np.exp(1.3) * 0.5 * 0.7 + np.exp(-1.4) * 0.5 * 0.9) / 2
    np.testing.assert_allclose(num, 0.85653066 + seq1 + seq2, rtol=1e-6)
    with pytest.raises(ValueError, match="ratio_low"):
        distill.mopd_loss(TRAIN, TEACHER, SAMPLER, MASK, ratio_low=1.5)


def test_micro_batch_exactness():
    num, den, metrics = distill.mopd_loss(TRAIN, TEACHER, SAMPLER, MASK)
    parts = [
        distill.mopd_loss(TRAIN[s], TEACHER[s], SAMPLER[s], MASK[s])
        for s in (slice(0, 2), slice(2, 4))
    ]
    np.testing.assert_allclose(parts[0][0] + parts[1][0], num, rtol=1e-6)
    assert float(parts[0][1] + parts[1][1]) == float(den)
    assert float(parts[0][2]["gated_frac"][0] + parts[1][2]["gated_frac"][0]) == 4.0


def test_student_equal_to_teacher_gives_zero():
    num, _, metrics = distill.mopd_loss(TRAIN, TRAIN, SAMPLER, MASK)
    assert float(num) == 0.0
    assert float(metrics["advantage_mean"][0]) == 0.0
