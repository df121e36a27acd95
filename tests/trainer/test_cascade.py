"""A toy cascade (2 steps per stage) end to end: interrupted between and inside stages, resumed."""

import dataclasses
import json
import os

import pytest

from configs import cascade as cascade_config
from nemocascade import checkpointing, config as config_lib, stage_registry
from nemocascade.trainer import cascade
from nemocascade.trainer.onpolicy import parts
from tests.trainer import cascade_toy

STAGES = stage_registry.ORDERS["c1"]


class Interrupted(Exception):
    pass


def _cfg():
    return cascade_toy.config("tiny_c1", STAGES)


def _chain(arg):
    return config_lib.from_config_dict(cascade_config.get_config(arg)).cascade.chain


def test_the_tiny_orders_end_with_a_final_mopd_and_tiny_c1_is_the_papers_order():
    assert _chain("tiny") == (*STAGES, "mopd")
    assert _chain("tiny_c2") == (*stage_registry.ORDERS["c2"], "mopd_final")
    assert _chain("tiny_c1") == STAGES
    assert _chain("8b") == STAGES
    assert _chain("8b_c2") == stage_registry.ORDERS["c2"]


@pytest.mark.parametrize(
    "order, stage, weights",
    [
        ("tiny", "mopd", (4.0, 1.0, 1.0, 1.0)),
        ("tiny_c2", "mopd", ()),
        ("tiny_c2", "mopd_final", (4.0, 1.0, 1.0, 1.0, 1.0)),
    ],
)
def test_mopd_weights_math_first_after_code_rl_and_equally_after_math_rl(order, stage, weights):
    """A MOPD after code RL leans on math (what code RL took); C2's after math RL does not.
    C2's final MOPD, after SWE RL, also distils SWE, with a teacher per mode."""
    spec = config_lib.from_config_dict(cascade_config.get_config(order)).cascade
    overrides = cascade.merged_overrides(spec).get(stage, {})
    cfg = cascade.stage_config(
        stage, "tiny", {**overrides, "rl.teachers": "math=/m"}, "", "/unused"
    )
    assert cfg.rl.domain_weights == weights
    final = stage == "mopd_final"
    assert cfg.rl.domains == ("math", "if", "code", "chat", "swe")[: 4 + final]
    assert cfg.rl.teacher_per_mode == final


@pytest.mark.parametrize("order, kl", [("tiny", 0.0), ("tiny_c2", 0.1)])
def test_c2_math_rl_keeps_a_kl_to_its_start(order, kl):
    """C2's math RL follows IF-RL and keeps a KL to its start; C1's (after IF-RL too) none."""
    spec = config_lib.from_config_dict(cascade_config.get_config(order)).cascade
    overrides = cascade.merged_overrides(spec).get("stage2_medium", {})
    cfg = cascade.stage_config("stage2_medium", "tiny", overrides, "", "/unused")
    assert cfg.rl.kl_coef == kl


def test_toy_cascade_interrupted_and_resumed(tmp_path, monkeypatch):
    workdir = str(tmp_path)
    cfg = _cfg()

    # 1) Interrupted between stages: only SFT and RM run.
    first = dataclasses.replace(cfg.cascade, stages=("sft", "rm"))
    cascade.run(dataclasses.replace(cfg, cascade=first), workdir)
    assert checkpointing.is_done(os.path.join(workdir, "rm"))
    assert not os.path.exists(os.path.join(workdir, "rlhf"))

    # 2) Interrupted inside a stage: math RL dies at its second step.
    real = parts.groups.sample_groups
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1 and os.path.exists(os.path.join(workdir, "stage2_medium", "checkpoints")):
            raise Interrupted()
        return real(*args, **kwargs)

    monkeypatch.setattr(parts.groups, "sample_groups", dying)
    with pytest.raises(Interrupted):
        cascade.run(cfg, workdir)
    assert checkpointing.is_done(os.path.join(workdir, "stage1_short"))
    assert not checkpointing.is_done(os.path.join(workdir, "stage2_medium"))

    # 3) The same command again finishes the chain.
    monkeypatch.setattr(parts.groups, "sample_groups", real)
    cascade.run(cfg, workdir)
    for stage in STAGES:
        assert checkpointing.is_done(os.path.join(workdir, stage)), stage
    with open(os.path.join(workdir, "report.md")) as f:
        report = f.read()
    for stage in STAGES:
        if stage != "rm":
            assert f"| {stage} |" in report, stage
    # How each stage ran (run.json): the records section lists every stage, rm included.
    records = report.split("## Run records")[1].split("##")[0]
    assert all(f"| {stage} | `" in records for stage in STAGES), records
    assert "8 × cpu (cpu), 1 process(es)" in records
    with open(os.path.join(workdir, "stage3_long", "eval_matrix.json")) as f:
        matrix = json.load(f)
    assert matrix["stage"] == "stage3_long"
    assert "math/thinking/pass@1" in matrix["metrics"]


def test_cascade_set_applies_on_top_of_the_size_defaults():
    spec = config_lib.from_config_dict(cascade_config.get_config("tiny")).cascade
    assert cascade.merged_overrides(spec) == {"rm": {"data.num_examples": 3200}}
    spec = dataclasses.replace(spec, set="rm.data.num_examples=800;sft.optim.lr=1e-3")
    assert cascade.merged_overrides(spec) == {
        "rm": {"data.num_examples": 800},
        "sft": {"optim.lr": 1e-3},
    }


def test_cascade_seed_reaches_every_stage_and_a_top_level_seed_is_refused():
    cd = cascade_config.get_config("tiny")
    cd.cascade.seed = 2
    spec = config_lib.from_config_dict(cd).cascade
    spec = dataclasses.replace(spec, set="sft.train.seed=5")
    out = cascade.merged_overrides(spec)
    assert {s: f["train.seed"] for s, f in out.items()} == {
        **{s: 2 for s in spec.chain},
        "sft": 5,  # cascade.set comes last
    }
    stage = cascade.stage_config("rlhf", "tiny", out["rlhf"], "", "/tmp/unused")
    assert stage.train.seed == 2
    cd = cascade_config.get_config("tiny")
    cd.train.seed = 1
    with pytest.raises(config_lib.ConfigError, match="config.cascade.seed"):
        config_lib.from_config_dict(cd)
