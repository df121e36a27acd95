"""A NaN reward stops the RL stage before the update, naming the last good checkpoint."""

import dataclasses
import types

import numpy as np
import pytest

from nemocascade import checkpointing
from nemocascade.trainer import loop
from nemocascade.trainer.onpolicy import parts
from nemocascade.trainer.stages import rl
from tests.trainer import test_rl_stage


def _rt(latest, directory="/w/stage2_medium/checkpoints"):
    manager = types.SimpleNamespace(latest_step=lambda: latest, directory=directory)
    return types.SimpleNamespace(manager=manager)


def test_check_finite_inputs_names_the_array_entry_and_checkpoint():
    cfg = types.SimpleNamespace(stage="stage2_medium")
    parts.check_finite_inputs(cfg, _rt(4), 5, rewards=np.ones(8), advantages=np.zeros(0))
    with pytest.raises(loop.NonFiniteError) as e:
        parts.check_finite_inputs(
            cfg, _rt(4), 5, rewards=np.ones(8), advantages=np.array([0.5, np.inf, np.nan])
        )
    assert str(e.value) == (
        "[stage2_medium] advantages has 2 non-finite value(s) at step 5 (first: entry 1 = inf); "
        "stopping before the update. Last good checkpoint: step 4 in /w/stage2_medium/checkpoints"
    )
    with pytest.raises(loop.NonFiniteError, match="Last good checkpoint: none yet in /w"):
        parts.check_finite_inputs(cfg, _rt(None, "/w"), 1, rewards=np.array([np.nan]))


class _NaNAtStep2:
    """The real rewarder, with one NaN score from its second call on."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, examples, rollouts):
        scores = np.array(self.real(examples, rollouts), np.float32)
        self.calls += 1
        if self.calls == 2:
            scores[3] = np.nan
        return scores

    def close(self):
        self.real.close()


def test_nan_reward_stops_rl_before_the_update(tmp_path, monkeypatch):
    cfg = test_rl_stage.toy_rl_config("stage2_medium")
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, checkpoint_every=1))
    real_make = rl.rewarders.make
    monkeypatch.setattr(rl.rewarders, "make", lambda *a: _NaNAtStep2(real_make(*a)))
    with pytest.raises(loop.NonFiniteError) as e:
        rl.run(cfg, str(tmp_path))
    directory = tmp_path / "stage2_medium" / "checkpoints"
    assert str(e.value).startswith("[stage2_medium] rewards has 1 non-finite value(s) at step 2")
    assert str(e.value).endswith(f"Last good checkpoint: step 1 in {directory}")
    assert not checkpointing.is_done(str(tmp_path / "stage2_medium"))
