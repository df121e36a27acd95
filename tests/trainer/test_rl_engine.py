"""The RL stage's rollout options end to end at toy size.

* `rl.engine="continuous"` samples the same rollouts as the static engine
  (same rng), its verifier rewards scored while decoding give the same
  rewards, and the step reports how much verification overlapped the rollout;
* `rl.updates_per_batch=2` runs two optimizer updates on one rollout batch.
"""

import dataclasses
import math

import pytest

from nemocascade import metrics as metrics_lib
from nemocascade.trainer.stages import rl
from tests.trainer import test_rl_stage

pytestmark = pytest.mark.slow  # each case runs a toy RL stage


def _run(tmp_path, name, **rl_fields) -> dict:
    cfg = test_rl_stage.toy_rl_config("stage2_medium")
    cfg = dataclasses.replace(
        cfg,
        rl=dataclasses.replace(cfg.rl, **rl_fields),
        train=dataclasses.replace(cfg.train, steps=1),
    )
    rl.run(cfg, str(tmp_path / name))
    records = metrics_lib.read(str(tmp_path / name / cfg.stage / "metrics.jsonl"))
    (step,) = [r for r in records if "reward_mean" in r]
    return step


def test_continuous_engine_gives_the_static_step(tmp_path):
    static = _run(tmp_path, "static")
    cont = _run(tmp_path, "continuous", engine="continuous", engine_slots=4)
    for key in ("reward_mean", "response_len_mean", "response_len_max"):
        assert cont[key] == static[key], key
    assert cont["loss"] == pytest.approx(static["loss"], abs=1e-5)
    assert "verify_overlap_s" not in static
    assert 0 <= cont["verify_overlap_s"] <= cont["verify_s"] + 1e-6
    assert cont["verify_wait_s"] >= 0


def test_two_updates_per_batch(tmp_path):
    step = _run(tmp_path, "u2", updates_per_batch=2)
    assert step["train_rows"] % 2 == 0
    for key in ("loss", "grad_norm", "clip_frac", "ratio_mean"):
        assert math.isfinite(step[key]), key
    assert step["ratio_mean"] != 1.0  # the second update sees moved params
