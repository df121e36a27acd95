"""The in-stage forgetting guard: drop detection, stop and keep, cascade wiring."""

import dataclasses
import json

import chex
import flax.linen as nn
import jax
import pytest

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.evaluation import report
from nemocascade.model import transformer
from nemocascade.trainer import cascade, stage_setup
from nemocascade.trainer.onpolicy import guard as guard_lib
from nemocascade.trainer.stages import rl
from tests.trainer import test_rl_stage


def test_drops_counts_only_falls_beyond_the_tolerance():
    base = {"a": 0.50, "b": 0.50, "c": 0.50}
    now = {"a": 0.48, "b": 0.46, "c": 0.90, "d": 0.0}
    assert report.drops(base, now, 0.03) == {"b": (0.50, 0.46)}
    assert report.drops(base, now, 0.0) == {"a": (0.50, 0.48), "b": (0.50, 0.46)}


def _guarded_config(stop: bool, steps: int = 3):
    cfg = test_rl_stage.toy_rl_config("stage2_medium")  # trains math; guards chat, if, code
    return config_lib.validate(
        dataclasses.replace(
            cfg,
            train=dataclasses.replace(cfg.train, steps=steps, eval_every=1),
            eval=dataclasses.replace(
                cfg.eval,
                domains=("math", "if"),
                num_per_domain=2,
                guard_tolerance=0.05,
                guard_stop=stop,
            ),
        )
    )


def _scripted_cells(monkeypatch, values):
    """The guard's evaluation returns `values` in turn (start, then each eval)."""
    calls = iter(values)
    monkeypatch.setattr(guard_lib.ForgettingGuard, "_cells", lambda self, params: next(calls))


def _params(path, cfg):
    abstract = jax.eval_shape(
        lambda: nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(0)))
    )
    return checkpointing.load_params(str(path), abstract)


def test_guard_stops_at_a_drop_and_exports_the_last_passing_params(tmp_path, monkeypatch):
    cfg = _guarded_config(stop=True)
    cell = "if/thinking/pass@1"
    _scripted_cells(monkeypatch, [{cell: 0.5}, {cell: 0.5}, {cell: 0.2}, {cell: 0.9}])
    rl.run(cfg, str(tmp_path))
    stage = tmp_path / "stage2_medium"
    assert checkpointing.is_done(str(stage))
    records = metrics_lib.read(str(stage / "metrics.jsonl"))
    assert [r["step"] for r in records if "reward_mean" in r] == [1, 2]  # step 3 never ran
    stop = [r for r in records if "guard/stopped_at" in r]
    assert stop and stop[0]["guard/stopped_at"] == 2 and stop[0]["guard/kept_step"] == 1
    assert json.loads((stage / "guard_baseline.json").read_text()) == {cell: 0.5}
    # The export is the state kept at step 1, not the one trained to step 2.
    manager = checkpointing.Manager(str(stage / "checkpoints_guard"), keep=1)
    assert manager.latest_step() == 1
    probe = stage_setup.setup(cfg, str(tmp_path / "probe"))
    kept, _ = manager.restore(probe.abstract_state, 1)
    probe.close()
    manager.close()
    chex.assert_trees_all_close(_params(stage, cfg), kept.params)


def test_guard_without_stop_only_logs_and_trains_to_the_end(tmp_path, monkeypatch):
    cfg = _guarded_config(stop=False, steps=2)
    cell = "if/instruct/pass@1"
    _scripted_cells(monkeypatch, [{cell: 0.5}, {cell: 0.1}, {cell: 0.1}])
    rl.run(cfg, str(tmp_path))
    records = metrics_lib.read(str(tmp_path / "stage2_medium" / "metrics.jsonl"))
    assert [r["step"] for r in records if "reward_mean" in r] == [1, 2]
    assert [r[f"guard/{cell}"] for r in records if f"guard/{cell}" in r] == [0.1, 0.1]
    assert not any("guard/stopped_at" in r for r in records)


def test_guard_watches_only_the_domains_the_stage_does_not_train():
    cfg = _guarded_config(stop=True)
    assert guard_lib.guarded_domains(cfg) == ("if",)


def test_guard_stop_needs_a_tolerance_and_an_eval():
    cfg = test_rl_stage.toy_rl_config("stage1_short")
    with pytest.raises(config_lib.ConfigError, match="guard_tolerance"):
        config_lib.validate(
            dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, guard_stop=True))
        )
    no_eval = dataclasses.replace(cfg.eval, guard_tolerance=0.03, num_per_domain=0)
    with pytest.raises(config_lib.ConfigError, match="num_per_domain"):
        config_lib.validate(dataclasses.replace(cfg, eval=no_eval))


def test_cascade_stop_on_forgetting_turns_the_guard_on_for_on_policy_stages():
    spec = config_lib.CascadeConfig(
        stop_on_forgetting=True, forgetting_tolerance=0.05, set="rlhf.eval.guard_stop=False"
    )
    out = cascade.merged_overrides(spec)
    assert out["stage3_long"] == {"eval.guard_tolerance": 0.05, "eval.guard_stop": True}
    assert out["rlhf"]["eval.guard_stop"] is False  # `cascade.set` still wins
    assert "sft" not in out and "rm" not in out
    assert cascade.merged_overrides(config_lib.CascadeConfig(forgetting_tolerance=0.05)) == {}
