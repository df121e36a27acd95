"""Group advantages, reward shaping and group flags against hand-computed values."""

import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.losses import advantages

# Group 0: one success of four. Group 1: all equal (std 0). Group 2: symmetric spread.
REWARDS = jnp.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.5, 1.5, 1.0, 1.0]])


def test_grpo_uses_population_std_and_zero_for_constant_group():
    # Group 0: mean 1/4, population std sqrt(3)/4 = 0.4330127 (ddof=1 would give 0.5 → 1.5, −0.5).
    # Group 2: mean 1, population std sqrt(0.125) = 0.35355339.
    expected = [
        [1.7320508, -0.5773503, -0.5773503, -0.5773503],
        [0.0, 0.0, 0.0, 0.0],
        [-1.4142136, 1.4142136, 0.0, 0.0],
    ]
    adv = advantages.group_advantages(REWARDS)
    assert adv.dtype == jnp.float32
    np.testing.assert_allclose(adv, expected, rtol=1e-6, atol=1e-7)


def test_grpo_round_off_constant_group_is_zero():
    # Float32 mean of equal 0.1s can differ from 0.1 by an ulp; the std threshold absorbs it.
    adv = advantages.group_advantages(jnp.full((2, 3), 0.1))
    np.testing.assert_array_equal(adv, np.zeros((2, 3)))


def test_loo_baseline():
    # r_i − mean of the other three.
    expected = [
        [1.0, -1 / 3, -1 / 3, -1 / 3],
        [0.0, 0.0, 0.0, 0.0],
        [0.5 - 3.5 / 3, 1.5 - 2.5 / 3, 0.0, 0.0],
    ]
    np.testing.assert_allclose(
        advantages.group_advantages(REWARDS, mode="loo"), expected, rtol=1e-6, atol=1e-7
    )


def test_mean_only():
    expected = [[0.75, -0.25, -0.25, -0.25], [0.0] * 4, [-0.5, 0.5, 0.0, 0.0]]
    np.testing.assert_allclose(advantages.group_advantages(REWARDS, mode="mean_only"), expected)


def test_bad_mode_and_single_member_loo_raise():
    with pytest.raises(ValueError, match="mode"):
        advantages.group_advantages(REWARDS, mode="rloo")
    with pytest.raises(ValueError, match="at least 2"):
        advantages.group_advantages(jnp.ones((3, 1)), mode="loo")


def test_shaped_rewards_zscore_tanh():
    expected = [
        [0.93929782, -0.52073691, -0.52073691, -0.52073691],
        [0.0] * 4,
        [-0.88838557, 0.88838557, 0.0, 0.0],
    ]
    np.testing.assert_allclose(advantages.shaped_rewards(REWARDS), expected, rtol=1e-6, atol=1e-7)
    # Scale-free: an affine change of the RM score leaves the shaped reward unchanged.
    np.testing.assert_allclose(
        advantages.shaped_rewards(REWARDS * 7.0 - 3.0), expected, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        advantages.shaped_rewards(REWARDS, "zscore")[0],
        [1.7320508, -0.5773503, -0.5773503, -0.5773503],
        rtol=1e-6,
    )


def test_group_stats_flags():
    stats = advantages.group_stats(
        jnp.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.5, 0.5, 0.5]])
    )
    np.testing.assert_array_equal(stats.all_correct, [True, False, False, False])
    np.testing.assert_array_equal(stats.all_wrong, [False, True, False, False])
    np.testing.assert_array_equal(stats.zero_std, [True, True, False, True])
