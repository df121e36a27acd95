"""RL batch preparation: overlong modes, advantages, batch-level dynamic filtering, curriculum."""

import dataclasses

import numpy as np
import pytest

from nemocascade import config as config_lib
from nemocascade.rollout import rows as rows_lib
from nemocascade.trainer.onpolicy import parts, rl_batch


def _rollout(n, t=4):
    return rows_lib.PolicyRows(
        inputs=np.zeros((n, t), np.int32),
        targets=np.zeros((n, t), np.int32),
        positions=np.zeros((n, t), np.int32),
        segment_ids=np.ones((n, t), np.int32),
        loss_mask=np.ones((n, t), np.int32),
        sampler_logprobs=np.zeros((n, t), np.float32),
    )


def test_advantages_and_batch_filter():
    rl = dataclasses.replace(config_lib.RLConfig(), dynamic_filter="batch", overlong="none")
    scores = np.array([1, 0, 0, 0, 1, 1, 1, 1], np.float32)  # group 2 has std 0
    p = rl_batch.prepare(rl, _rollout(8), scores, np.zeros(8, bool), group_size=4)
    np.testing.assert_allclose(
        p.batch["advantages"],
        [1.7320508, -0.5773503, -0.5773503, -0.5773503, 0, 0, 0, 0],
        rtol=1e-6,
    )
    np.testing.assert_array_equal(p.kept_groups, [True, False])
    assert p.batch["loss_mask"][4:].sum() == 0 and p.batch["loss_mask"][:4].sum() == 16
    assert p.metrics["groups_filtered"] == 0.5 and p.metrics["pass_rate"] == 0.625


@pytest.mark.parametrize("mode", ["filter", "zero_reward", "none"])
def test_overlong_modes(mode):
    rl = dataclasses.replace(config_lib.RLConfig(), overlong=mode)
    scores = np.array([1, 1, 0, 0], np.float32)
    truncated = np.array([False, True, False, False])
    p = rl_batch.prepare(rl, _rollout(4), scores, truncated, group_size=4)
    in_loss = p.batch["loss_mask"].sum(axis=1) > 0
    if mode == "filter":
        np.testing.assert_array_equal(in_loss, [True, False, True, True])
        np.testing.assert_array_equal(p.rewards, [1, 0, 0, 0])
    elif mode == "zero_reward":
        np.testing.assert_array_equal(in_loss, [True] * 4)
        np.testing.assert_array_equal(p.rewards, [1, 0, 0, 0])
    else:
        np.testing.assert_array_equal(p.rewards, [1, 1, 0, 0])
        np.testing.assert_allclose(p.batch["advantages"], [1, 1, -1, -1])


def test_curriculum_phases():
    rl = dataclasses.replace(
        config_lib.RLConfig(),
        curriculum=(
            config_lib.CurriculumStage(2, 64, 1.0),
            config_lib.CurriculumStage(3, 96, 0.8),
        ),
    )
    phases = [parts.phase_at(rl, s) for s in range(1, 8)]
    assert [p.max_new_tokens for p in phases] == [64, 64, 96, 96, 96, 96, 96]
    assert [p.temperature for p in phases] == [1.0, 1.0, 0.8, 0.8, 0.8, 0.8, 0.8]
    assert parts.modes_for(dataclasses.replace(rl, mode="half_half"), 4) == [
        "thinking",
        "instruct",
        "thinking",
        "instruct",
    ]


def test_compact_keeps_the_loss_exactly():
    from nemocascade.losses import policy

    rng = np.random.default_rng(0)
    n, t = 16, 5
    batch = dict(_rollout(n, t))
    batch["loss_mask"] = (rng.random((n, t)) < 0.8).astype(np.int32)
    batch["loss_mask"][[1, 2, 5, 6, 7, 9, 10, 11, 12, 13, 14]] = 0  # 5 rows stay
    batch["advantages"] = rng.normal(size=n).astype(np.float32)
    batch["inputs"] = np.arange(n)[:, None] + np.zeros((1, t), np.int32)
    logp = rng.normal(size=(n, t)).astype(np.float32)
    out = rl_batch.compact(batch, multiple=2)
    assert len(out["loss_mask"]) == 8  # 5 kept rows -> bucket 2 * 4
    np.testing.assert_array_equal(out["inputs"][:5, 0], [0, 3, 4, 8, 15])
    assert out["loss_mask"][5:].sum() == 0 and not out["advantages"][5:].any()
    idx = out["inputs"][:, 0]
    for agg in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum"):
        full = policy.policy_loss(
            logp, logp, batch["advantages"], batch["loss_mask"], aggregation=agg
        )
        small = policy.policy_loss(
            logp[idx], logp[idx], out["advantages"], out["loss_mask"], aggregation=agg
        )
        if agg == "token_mean":
            np.testing.assert_allclose(small[0], full[0], rtol=1e-6)
            np.testing.assert_allclose(small[1], full[1])
        else:
            np.testing.assert_allclose(small[0] / small[1], full[0] / full[1], rtol=1e-6)
    # Nothing to drop (or no smaller bucket): the batch is returned as is.
    assert rl_batch.compact(_rollout(4), multiple=4)["loss_mask"].shape == (4, 4)


def test_compact_trims_padding_columns_without_changing_log_probs():
    import flax.linen as nn
    import jax

    from nemocascade.model import transformer
    from nemocascade.trainer import forward
    from tests.trainer.helpers import TOY_MODEL

    rng = np.random.default_rng(1)
    n, t = 4, 40
    batch = dict(_rollout(n, t))
    batch["inputs"] = rng.integers(1, 64, size=(n, t)).astype(np.int32)
    batch["targets"] = rng.integers(1, 64, size=(n, t)).astype(np.int32)
    batch["positions"] = np.broadcast_to(np.arange(t, dtype=np.int32), (n, t)).copy()
    ends = np.array([9, 17, 12, 5])  # last used column of each row
    used = np.arange(t)[None] <= ends[:, None]
    batch["segment_ids"] = used.astype(np.int32)
    batch["loss_mask"] = (used & (np.arange(t)[None] >= 3)).astype(np.int32)
    batch["advantages"] = rng.normal(size=n).astype(np.float32)
    out = rl_batch.compact(batch, multiple=4, length_multiple=8)
    assert out["loss_mask"].shape == (4, 24)  # columns 0..17 used -> 24
    assert out["advantages"].shape == (4,)
    params = nn.meta.unbox(transformer.init_params(TOY_MODEL, jax.random.key(0)))
    full, _ = forward.sequence_logprobs(params, TOY_MODEL, batch)
    cut, _ = forward.sequence_logprobs(params, TOY_MODEL, out)
    m = out["loss_mask"] > 0
    np.testing.assert_allclose(
        np.asarray(cut)[m], np.asarray(full)[:, :24][m], rtol=1e-5, atol=1e-6
    )
    assert batch["loss_mask"].sum() == out["loss_mask"].sum()
    # The distillation batch (no advantages) keeps its rows in order: only columns go.
    mopd = {k: v for k, v in batch.items() if k != "advantages"}
    cut_only = rl_batch.trim_columns(mopd, 8)
    assert set(cut_only) == set(mopd) and cut_only["inputs"].shape == (4, 24)
    np.testing.assert_array_equal(cut_only["inputs"], batch["inputs"][:, :24])
    assert rl_batch.trim_columns(mopd, 64) is mopd  # nothing to cut
