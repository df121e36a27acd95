"""The tiny C2 recipe at toy sizes: interrupted in MOPD, resumed, teachers from its own chain."""

import json
import os

import pytest

from nemocascade import checkpointing, config as config_lib, stage_registry
from nemocascade.trainer import cascade
from nemocascade.trainer.onpolicy import parts
from tests.trainer import cascade_toy

STAGES = stage_registry.ORDERS["c2_mopd"]  # C2's order and a final MOPD


class Interrupted(Exception):
    pass


def test_c2_toy_cascade_interrupted_in_mopd_and_resumed(tmp_path, monkeypatch):
    workdir = str(tmp_path)
    cfg = cascade_toy.config("tiny_c2", STAGES)
    assert cfg.cascade.order == "c2_mopd"
    mopd_dir = os.path.join(workdir, "mopd")

    # MOPD dies at its second rollout, after its first checkpoint.
    real = parts.groups.sample_groups

    def dying(*args, **kwargs):
        if os.path.exists(os.path.join(mopd_dir, "checkpoints")):
            raise Interrupted()
        return real(*args, **kwargs)

    monkeypatch.setattr(parts.groups, "sample_groups", dying)
    with pytest.raises(Interrupted):
        cascade.run(cfg, workdir)
    before = STAGES[: STAGES.index("mopd")]
    for stage in before:
        assert checkpointing.is_done(os.path.join(workdir, stage)), stage
    assert not checkpointing.is_done(mopd_dir)
    assert not os.path.exists(os.path.join(workdir, "rm"))

    # The same command again finishes the chain.
    monkeypatch.setattr(parts.groups, "sample_groups", real)
    cascade.run(cfg, workdir)
    for stage in STAGES:
        assert checkpointing.is_done(os.path.join(workdir, stage)), stage

    # Each MOPD's teachers are policy stages of this chain that finished before
    # it, one per domain it trains; the final one may pick the first MOPD.
    for mopd in ("mopd", "mopd_final"):
        with open(os.path.join(workdir, mopd, "config.json")) as f:
            rl = json.load(f)["rl"]
        teachers = config_lib.parse_teachers(rl["teachers"])
        modes = ("thinking", "instruct") if rl["mode"] == "half_half" else (rl["mode"],)
        served = {
            (d, m): config_lib.teacher_key(teachers, d, m) for d in rl["domains"] for m in modes
        }
        assert None not in served.values(), (mopd, teachers)
        assert set(served.values()) == set(teachers), (mopd, teachers, rl["domains"])
        earlier = {
            os.path.join(workdir, s)
            for s in STAGES[: STAGES.index(mopd)]
            if not stage_registry.get(s).side
        }
        assert set(teachers.values()) <= earlier, (mopd, teachers)
    with open(os.path.join(workdir, "report.md")) as f:
        report = f.read()
    assert all(f"| {stage} | `" in report for stage in STAGES), report
