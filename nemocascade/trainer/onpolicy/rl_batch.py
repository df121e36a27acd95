"""From scored rollouts to the RL train batch: overlong handling, advantages, filtering.

Host-side numpy glue between the sampler, the verifiers and the train step;
the numerics (advantages) are the pure functions of `nemocascade.losses`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from nemocascade import config as config_lib
from nemocascade.losses import advantages as adv_lib
from nemocascade.rollout import rows as rows_lib
from nemocascade.sharding import hosts


@dataclasses.dataclass(frozen=True)
class Prepared:
    batch: dict[str, np.ndarray]  # `rows.train_batch`: the rows + advantages (+ ref_logprobs)
    rewards: np.ndarray  # [N] rewards used for advantages (after overlong handling)
    kept_groups: np.ndarray  # [num_groups] bool
    metrics: dict[str, float]


def prepare(
    rl: config_lib.RLConfig,
    policy_rows: rows_lib.PolicyRows,
    scores: np.ndarray,
    truncated: np.ndarray,
    group_size: int,
    ref_logprobs: np.ndarray | None = None,
) -> Prepared:
    """Applies the paper's per-stage options and computes group advantages.

    * overlong `filter`: truncated responses are excluded from the loss (their
      reward still enters the group statistics as 0 — they did not answer);
      `zero_reward`: truncated responses get reward 0 and stay in the loss;
      `none`: the verifier's score is used as is.
    * advantages per group: (r − mean)/std, 0 where std = 0 (or `loo`, `mean_only`),
      optionally after z-score+tanh shaping.
    * dynamic filtering `batch` (and `refill`, which then samples more prompts:
      `onpolicy/refill.py`): groups whose rewards are all equal are dropped
      from the loss (they carry no signal and would only dilute the token mean).
    """
    scores = np.asarray(scores, np.float32)
    truncated = np.asarray(truncated, bool)
    rewards = scores.copy()
    if rl.overlong in ("filter", "zero_reward"):
        rewards = np.where(truncated, 0.0, rewards).astype(np.float32)
    groups = rewards.reshape(-1, group_size)
    if rl.reward_shaping != "none":
        groups = np.asarray(adv_lib.shaped_rewards(jnp.asarray(groups), rl.reward_shaping))
    adv = np.asarray(adv_lib.group_advantages(jnp.asarray(groups), mode=rl.advantage))
    zero_std = np.asarray(groups.std(axis=-1) <= 1e-6)
    drop = rl.dynamic_filter in ("batch", "refill")
    kept = ~zero_std if drop else np.ones(len(groups), bool)

    loss_mask = policy_rows.loss_mask.copy()
    seq_keep = np.repeat(kept, group_size)
    if rl.overlong == "filter":
        seq_keep &= ~truncated
    loss_mask *= seq_keep[:, None].astype(loss_mask.dtype)
    extra = {"advantages": adv.reshape(-1)}
    if ref_logprobs is not None:
        extra["ref_logprobs"] = ref_logprobs
    batch = rows_lib.train_batch(policy_rows.replace(loss_mask=loss_mask), **extra)
    metrics = {
        "reward_mean": float(scores.mean()),
        "pass_rate": float((scores >= 1.0).mean()),
        "groups_zero_std": float(zero_std.mean()),
        "groups_filtered": float(1.0 - kept.mean()),
        "truncation_rate": float(truncated.mean()),
        "seqs_in_loss": float(seq_keep.mean()),
    }
    return Prepared(batch, rewards, kept, metrics)


def compact(
    batch: dict[str, np.ndarray], multiple: int, length_multiple: int = 0
) -> dict[str, np.ndarray]:
    """Drops rows outside the loss, pads the rest to a power-of-two bucket, trims padding columns.

    A row whose `loss_mask` is all zero (a filtered group, an overlong-filtered
    response) adds nothing to the loss numerator or denominator, so training on
    the kept rows alone gives the same loss and gradient at a fraction of the
    cost. Rows are padded (copies with an all-zero mask and zero advantage) to
    a power of two times `multiple` (micro-batches × batch shards), so the
    train step compiles for a handful of shapes only.

    With `length_multiple > 0` the trailing columns that are padding in every
    row (responses shorter than `max_new_tokens`) are cut, keeping a multiple
    of `length_multiple` columns: attention is causal, so no kept position
    sees them, and they are outside the loss. Single-process only: on several
    hosts each would pick its own shapes.
    """
    keep = np.flatnonzero(batch["loss_mask"].sum(axis=1) > 0)
    n = batch["loss_mask"].shape[0]
    rows = hosts.pow2_bucket(len(keep), multiple)
    out = dict(batch)
    if rows < n:
        fill = np.full(rows - len(keep), keep[0] if len(keep) else 0)
        index = np.concatenate([keep, fill]).astype(np.int64)
        out = {k: v[index] for k, v in batch.items()}
        out["loss_mask"] = out["loss_mask"].copy()
        out["loss_mask"][len(keep) :] = 0
        out["advantages"] = out["advantages"].copy()
        out["advantages"][len(keep) :] = 0
    return trim_columns(out, length_multiple) if length_multiple > 0 else out


def trim_columns(batch: Mapping[str, np.ndarray], length_multiple: int) -> Mapping[str, np.ndarray]:
    """Cuts trailing all-padding columns, keeping a multiple of `length_multiple` columns.

    Attention is causal, so no kept position sees the cut columns, and they
    are outside the loss. Rows keep their order (per-row side data stays valid).
    """
    t = batch["loss_mask"].shape[1]
    used = np.flatnonzero((batch["segment_ids"] > 0).any(axis=0) | (batch["loss_mask"] > 0).any(0))
    width = -(-(int(used[-1]) + 1 if len(used) else 1) // length_multiple) * length_multiple
    if width >= t:
        return batch
    return {k: (v[:, :width] if v.ndim == 2 and v.shape[1] == t else v) for k, v in batch.items()}
