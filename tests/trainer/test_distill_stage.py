"""The MOPD stage at toy size: routing to per-domain teachers, a real update, the sanity case.

Teachers are exported parameter sets (`checkpointing.export_params`) of the
toy model: the student's own initialization (seed 0) and another one (seed 1).
A teacher equal to the student must give a zero advantage before the first
update, since teacher and student score the same tokens with the same params
at the same temperature.
"""

import math

import chex
import flax.linen as nn
import jax
import numpy as np
import pytest

from configs import mopd as mopd_config
from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.model import transformer
from nemocascade.trainer.stages import distill

TOY_MODEL = dict(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, d_ff=64)


def toy_config(teachers: str, domains=("math", "if"), steps=2, **optim) -> config_lib.Config:
    cd = mopd_config.get_config("tiny")
    cd.model.update(TOY_MODEL)
    cd.train.update(
        steps=steps,
        batch_size=8,
        num_microbatches=1,
        log_every=1,
        checkpoint_every=100,
        progress=False,
    )
    cd.rl.update(
        domains=domains,
        domain_weights=(),  # the tiny config's weights are for its four domains
        teachers=teachers,
        prompts_per_step=2,
        group_size=4,
        eval_num=0,
        num_prompts=16,
        max_new_tokens=16,
        verifier_workers=0,
    )
    cd.optim.update(optim)
    cd.eval.update(num_per_domain=0)
    return config_lib.from_config_dict(cd)


def init_params(cfg: config_lib.Config, seed: int):
    return nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(seed)))


def export(tmp_path, name: str, cfg: config_lib.Config, seed: int, scale: float = 1.0) -> str:
    """Exported init params; `scale` > 1 sharpens the (near-uniform) toy distribution."""
    path = str(tmp_path / name)
    checkpointing.export_params(path, jax.tree.map(lambda x: x * scale, init_params(cfg, seed)))
    return path


def step_records(workdir, stage="mopd"):
    records = metrics_lib.read(str(workdir / stage / "metrics.jsonl"))
    return [r for r in records if "advantage_mean" in r]


def test_two_steps_route_to_domain_teachers(tmp_path):
    probe = toy_config("")
    same = export(tmp_path, "same", probe, seed=0)  # == the student's init (train.seed 0)
    other = export(tmp_path, "other", probe, seed=1, scale=4.0)
    cfg = toy_config(f"math={same},if={other}", lr=1e-2, warmup_steps=2)
    workdir = tmp_path / "run"
    distill.run(cfg, str(workdir))

    steps = step_records(workdir)
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for key in ("loss", "grad_norm", "advantage_mean", "gated_frac", "response_len_mean"):
            assert math.isfinite(r[key]), (key, r)
        for key in ("rollout_s", "teacher_s", "train_s"):
            assert r[key] > 0, (key, r)
        assert 0.0 <= r["gated_frac"] <= 1.0
    first = steps[0]
    # Math rows were scored by the student's own init, IF rows by another model.
    assert abs(first["teacher_gap/math"]) < 1e-3, first
    assert abs(first["teacher_gap/if"]) > 0.1, first
    assert first["grad_norm"] > 0
    # Warm-up from 0.1x over 2 steps: 1e-3, then halfway.
    np.testing.assert_allclose([r["lr"] for r in steps], [1e-3, 5.5e-3], rtol=1e-6)

    assert checkpointing.is_done(str(workdir / "mopd"))
    abstract = jax.eval_shape(lambda: init_params(cfg, 0))
    final = checkpointing.load_params(str(workdir / "mopd"), abstract)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(final, init_params(cfg, 0))


def test_teacher_equal_to_student_gives_zero_advantage(tmp_path):
    probe = toy_config("", domains=("math",))
    same = export(tmp_path, "same", probe, seed=0)
    cfg = toy_config(f"math={same}", domains=("math",), steps=1)
    distill.run(cfg, str(tmp_path / "run"))
    (first,) = step_records(tmp_path / "run")
    assert abs(first["advantage_mean"]) < 1e-5, first
    assert abs(first["loss"]) < 1e-5, first
    assert first["grad_norm"] < 1e-4, first
    assert first["gated_frac"] == 0.0
    assert first["sampler_logprob_gap"] < 1e-3


def test_rows_route_to_their_modes_teacher(tmp_path):
    probe = toy_config("", domains=("math",))
    same = export(tmp_path, "same", probe, seed=0)
    other = export(tmp_path, "other", probe, seed=1, scale=4.0)
    teachers = f"math/thinking={same},math/instruct={other}"
    distill.run(toy_config(teachers, domains=("math",), steps=1), str(tmp_path / "run"))
    (first,) = step_records(tmp_path / "run")
    # Half the prompts sample in each mode; each mode's rows met their own teacher.
    assert abs(first["teacher_gap/math/thinking"]) < 1e-3, first
    assert abs(first["teacher_gap/math/instruct"]) > 0.1, first
    assert "teacher_gap/math" not in first


def test_teacher_dirs_need_every_domain():
    cfg = toy_config("math=/x", domains=("math", "if"))
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.teachers.*\['if'\]"):
        distill.teacher_dirs(cfg.rl)
    cfg = toy_config("math=/x,if=/y,code=/z", domains=("math", "if"))
    assert distill.teacher_dirs(cfg.rl) == {"math": "/x", "if": "/y"}


def test_teacher_dirs_per_mode_need_every_sampled_mode():
    assert toy_config("").rl.mode == "half_half"
    cfg = toy_config("math/thinking=/t", domains=("math",))
    with pytest.raises(config_lib.ConfigError, match=r"no teacher for \['math/instruct'\]"):
        distill.teacher_dirs(cfg.rl)
    cfg = toy_config("math/thinking=/t,math=/x,if/instruct=/i", domains=("math",))
    # A mode's own key comes first; the domain's serves the other mode; `if` is unused.
    assert distill.teacher_dirs(cfg.rl) == {"math/thinking": "/t", "math": "/x"}


def test_run_fails_before_setup_without_teachers(tmp_path):
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.teachers"):
        distill.run(toy_config(""), str(tmp_path))
    assert not (tmp_path / "mopd").exists()


def test_unused_rl_options_are_rejected():
    cfg = toy_config("math=/x,if=/y")
    distill.check_config(cfg.rl)
    bad = config_lib.RLConfig(kl_coef=0.1, overlong="zero_reward")
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.kl_coef.*config\.rl\.overlong"):
        distill.check_config(bad)


def test_teacher_gaps():
    teacher = np.array([[-1.0, -2.0], [-0.5, 0.0], [-3.0, -1.0]])
    sampler = np.array([[-1.5, -1.0], [-0.5, -9.0], [-1.0, -1.0]])
    mask = np.array([[1, 1], [1, 0], [1, 1]])
    gaps = distill.teacher_gaps(teacher, sampler, mask, ["math", "if", "math"])
    # math: (0.5 − 1.0 − 2.0 + 0) / 4; if: 0 / 1 (the masked −9 is ignored)
    assert gaps == {"teacher_gap/math": -0.625, "teacher_gap/if": 0.0}
