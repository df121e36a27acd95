"""Group-relative advantages, reward shaping and group statistics for dynamic filtering.

Rewards arrive shaped [num_groups, G]: one row per prompt, one column per
sampled response. Every token of response i shares its advantage Â_i.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

MODES = ("grpo", "loo", "mean_only")
SHAPINGS = ("zscore_tanh", "zscore")


def _group_std(r_gn: jax.Array) -> jax.Array:
    """Population standard deviation (ddof = 0) of each group, shape [num_groups, 1]."""
    return jnp.std(r_gn, axis=-1, keepdims=True)


def group_advantages(rewards_g_n: jax.Array, *, mode: str = "grpo", eps: float = 1e-6) -> jax.Array:
    """Per-response advantages, float32 [num_groups, G].

        grpo       Â_i = (r_i − mean_j r_j) / std_j r_j,  and 0 where std ≤ eps
        loo        Â_i = r_i − mean_{j≠i} r_j             (leave-one-out, no std)
        mean_only  Â_i = r_i − mean_j r_j

    "grpo" is the paper's formula (Nemotron-Cascade §4.1.2) with the
    *population* std (ddof = 0, e.g. rewards (1, 0, 0, 0) have std √3/4). A
    group whose rewards are all equal carries no learning signal and gets
    Â = 0 instead of 0/0; `eps` only decides what "equal" means under float
    round-off (it is a threshold, not added to the divisor). "loo" is the
    NeMo-RL default baseline and needs G ≥ 2.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    r_gn = rewards_g_n.astype(jnp.float32)
    g = r_gn.shape[-1]
    mean_g1 = jnp.mean(r_gn, axis=-1, keepdims=True)
    if mode == "mean_only":
        return r_gn - mean_g1
    if mode == "loo":
        if g < 2:
            raise ValueError("mode='loo' needs at least 2 responses per group")
        others_mean_gn = (jnp.sum(r_gn, axis=-1, keepdims=True) - r_gn) / (g - 1)
        return r_gn - others_mean_gn
    std_g1 = _group_std(r_gn)
    nonzero_g1 = std_g1 > eps
    return jnp.where(nonzero_g1, (r_gn - mean_g1) / jnp.where(nonzero_g1, std_g1, 1.0), 0.0)


def shaped_rewards(
    rewards_g_n: jax.Array, kind: str = "zscore_tanh", *, eps: float = 1e-6
) -> jax.Array:
    """Reward-model scores made scale-free per group, float32 [num_groups, G].

        zscore       z_i = (r_i − mean_j r_j) / std_j r_j  (0 where std ≤ eps)
        zscore_tanh  tanh(z_i)

    An RLHF stabilizer: reward-model scores have no fixed scale and
    occasional outliers; the group z-score removes the scale and tanh bounds
    the outliers to (−1, 1) before advantages are formed.
    """
    if kind not in SHAPINGS:
        raise ValueError(f"kind must be one of {SHAPINGS}, got {kind!r}")
    z_gn = group_advantages(rewards_g_n, mode="grpo", eps=eps)
    return jnp.tanh(z_gn) if kind == "zscore_tanh" else z_gn


class GroupStats(NamedTuple):
    """Boolean flags per group, each [num_groups]."""

    all_correct: jax.Array
    all_wrong: jax.Array
    zero_std: jax.Array


def group_stats(
    rewards_g_n: jax.Array,
    *,
    correct: float = 1.0,
    wrong: float = 0.0,
    eps: float = 1e-6,
) -> GroupStats:
    """Per-group flags for dynamic filtering (DAPO-style).

        all_correct  every r_i ≥ correct
        all_wrong    every r_i ≤ wrong
        zero_std     population std ≤ eps (Â = 0 for every response under "grpo")

    With verifier rewards in [0, 1] the first two are the recipe's "solved"
    and "hopeless" prompts; zero_std also catches groups that tie at any
    other value.
    """
    r_gn = rewards_g_n.astype(jnp.float32)
    return GroupStats(
        all_correct=jnp.all(r_gn >= correct, axis=-1),
        all_wrong=jnp.all(r_gn <= wrong, axis=-1),
        zero_std=_group_std(r_gn)[:, 0] <= eps,
    )
