"""Verifier reward + reward-model bonus (C1 §4.4): hand values, the rewarder, config checks."""

import types

import numpy as np
import pytest

from configs import stage1_short
from nemocascade import config as config_lib
from nemocascade.trainer.onpolicy import rm_bonus


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_combine_hand_values():
    verifier = np.array([1, 1, 0, 1, 1, 0, 0, 1], np.float32)
    rm = np.array([2.0, 0.0, 5.0, 1.0, 3.0, 3.0, 3.0, 3.0])
    group = np.repeat([0, 1], 4)
    # group 0: mean 2, std sqrt(3.5); group 1: all 3.0, z = 0 (bonus 0.5)
    z0 = (rm[:4] - 2.0) / np.sqrt(3.5)
    expected = [1 + _sigmoid(z0[0]), 1 + _sigmoid(z0[1]), 0, 1 + _sigmoid(z0[3]), 1.5, 0, 0, 1.5]
    np.testing.assert_allclose(rm_bonus.combine(verifier, rm, group), expected, rtol=1e-6)


def test_failing_answers_get_nothing_however_good_the_rm_says_they_are():
    out = rm_bonus.combine(np.array([0.0, 1.0]), np.array([100.0, -100.0]), np.array([0, 0]))
    assert out[0] == 0.0 and out[1] == pytest.approx(1 + _sigmoid(-1.0))  # z = -1 of two


def test_rewarder_composes_and_closes():
    closed = []

    class Fixed:
        def __init__(self, values, name):
            self.values, self.name = np.asarray(values, np.float32), name

        def __call__(self, examples, rollouts):
            return self.values

        def close(self):
            closed.append(self.name)

    rewarder = rm_bonus.RMBonusRewarder(Fixed([1, 0, 1, 1], "v"), Fixed([1, 9, 3, 3], "rm"))
    rollouts = types.SimpleNamespace(example_index=np.array([0, 0, 1, 1]))
    out = rewarder([], rollouts)
    np.testing.assert_allclose(out, [1 + _sigmoid(-1.0), 0.0, 1.5, 1.5], rtol=1e-6)
    rewarder.close()
    assert closed == ["v", "rm"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"reward": "rm"}, r"config\.rl\.rm_bonus"), ({"dynamic_filter": "epoch"}, "'epoch'")],
)
def test_config_checks(overrides, message):
    cd = stage1_short.get_config("tiny")
    cd.rl.rm_bonus = True
    assert config_lib.from_config_dict(cd).rl.rm_bonus
    for key, value in overrides.items():
        setattr(cd.rl, key, value)
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.from_config_dict(cd)
