"""Two RL steps of every stage config at toy size: metrics finite, params changed.

An untrained toy model rarely earns a verifiable reward, so all advantages can
be zero; a small entropy bonus keeps the update non-zero (dynamic and overlong
filtering are off here: they would drop such groups and the always-truncated
toy responses; both are unit-tested in test_rl_batch.py) so the test checks
that the whole step (rollout → reward → loss → optimizer) runs and moves the
params.
"""

import dataclasses
import math

import chex
import flax.linen as nn
import jax
import pytest

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.model import transformer
from nemocascade.trainer.stages import rl

TOY_MODEL = dict(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, d_ff=64)


def toy_rl_config(name: str) -> config_lib.Config:
    module = __import__(f"configs.{name}", fromlist=["get_config"])
    cd = module.get_config("tiny")
    cd.model.update(TOY_MODEL)
    cd.train.update(
        steps=2, batch_size=8, num_microbatches=1, log_every=1, checkpoint_every=100, progress=False
    )
    cd.rl.update(
        prompts_per_step=2,
        group_size=4,
        eval_num=2,
        num_prompts=16,
        verifier_workers=0,
        entropy_coef=0.01,
        dynamic_filter="none",
        overlong="none",
    )
    if cd.rl.curriculum:
        cd.rl.curriculum = [
            {"steps": 1, "max_new_tokens": 16, "temperature": 1.0},
            {"steps": 1, "max_new_tokens": 24, "temperature": 0.8},
        ]
    cd.rl.max_new_tokens = 16
    cd.eval.update(num_per_domain=0, max_new_tokens=16, thinking_budget=8, batch_size=8)
    return config_lib.from_config_dict(cd)


def _exported(cfg: config_lib.Config, stage_dir) -> dict:
    """The params a finished stage exported."""
    abstract = jax.eval_shape(
        lambda: nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(0)))
    )
    return checkpointing.load_params(str(stage_dir), abstract)


@pytest.mark.parametrize("name", ["stage1_short", "stage2_medium", "stage3_long", "stage4_swe"])
def test_two_rl_steps(tmp_path, name):
    cfg = toy_rl_config(name)
    rl.run(cfg, str(tmp_path))
    records = metrics_lib.read(str(tmp_path / name / "metrics.jsonl"))
    steps = [r for r in records if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for key in ("loss", "grad_norm", "entropy", "reward_mean", "response_len_mean"):
            assert math.isfinite(r[key]), (key, r)
        assert r["grad_norm"] > 0
    assert checkpointing.is_done(str(tmp_path / name))
    final = _exported(cfg, tmp_path / name)
    init = nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(cfg.train.seed)))
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(final, init)


def test_rl_step_on_a_tensor_parallel_mesh(tmp_path):
    """fsdp_tp on 2×2×2: the train batch is compacted to a multiple of the 4 batch shards."""
    cfg = toy_rl_config("stage1_short")
    cfg = dataclasses.replace(
        cfg,
        mesh=config_lib.MeshConfig(shape=(2, 2, 2), rules="fsdp_tp"),
        model=dataclasses.replace(cfg.model, num_kv_heads=2),  # heads split over 'tensor'
        rl=dataclasses.replace(cfg.rl, prompts_per_step=3),  # 12 rows: 3 × the 4 batch shards
        train=dataclasses.replace(cfg.train, batch_size=12),
    )
    rl.run(cfg, str(tmp_path))
    records = metrics_lib.read(str(tmp_path / "stage1_short" / "metrics.jsonl"))
    steps = [r for r in records if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # Padded to a multiple of the data-parallel shards (4), not of all 8 devices (16 rows).
    assert all(r["train_rows"] == 12 and r["grad_norm"] > 0 for r in steps), steps


class _Preempted(Exception):
    pass


def test_a_resumed_stage_keeps_the_kl_reference_of_its_start(tmp_path, monkeypatch):
    """KL to the stage's start: after a resume the reference is still `init.init_from`'s
    params, not the resumed ones, so the run equals an uninterrupted one."""
    start = toy_rl_config("stage3_long")
    init = nn.meta.unbox(transformer.init_params(start.model, jax.random.key(7)))
    checkpointing.export_params(str(tmp_path / "init"), init)
    cfg = dataclasses.replace(
        start,
        init=dataclasses.replace(start.init, init_from=str(tmp_path / "init")),
        rl=dataclasses.replace(start.rl, kl_coef=0.5),
        train=dataclasses.replace(start.train, steps=3, checkpoint_every=2),
    )
    rl.run(cfg, str(tmp_path / "whole"))

    real_prepare = rl.GRPO.prepare

    def dying_prepare(self, step, *args):
        if step == 3:  # steps 1-2 ran and step 2 is checkpointed
            raise _Preempted()
        return real_prepare(self, step, *args)

    monkeypatch.setattr(rl.GRPO, "prepare", dying_prepare)
    with pytest.raises(_Preempted):
        rl.run(cfg, str(tmp_path / "cut"))
    monkeypatch.setattr(rl.GRPO, "prepare", real_prepare)
    assert not checkpointing.is_done(str(tmp_path / "cut" / "stage3_long"))
    rl.run(cfg, str(tmp_path / "cut"))

    def steps(run):
        rows = metrics_lib.read(str(tmp_path / run / "stage3_long" / "metrics.jsonl"))
        return {r["step"]: r for r in rows if "reward_mean" in r}

    whole, cut = steps("whole"), steps("cut")
    assert sorted(cut) == sorted(whole) == [1, 2, 3]
    # Step 3 ran after the resume; its reference must still be the stage's start.
    assert whole[3]["kl_ref"] > 0  # the policy moved away from its start
    assert cut[3]["kl_ref"] == pytest.approx(whole[3]["kl_ref"], rel=1e-4, abs=1e-8)
    assert cut[3]["loss"] == pytest.approx(whole[3]["loss"], rel=1e-4, abs=1e-7)
    chex.assert_trees_all_close(
        _exported(cfg, tmp_path / "whole" / "stage3_long"),
        _exported(cfg, tmp_path / "cut" / "stage3_long"),
        atol=1e-6,
    )
