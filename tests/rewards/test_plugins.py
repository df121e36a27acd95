"""Reward plug-ins: `rl.reward_fn=package.module:function`, validated, run in the pool."""

import types

import numpy as np
import pytest

from configs import stage2_medium
from nemocascade import config as config_lib
from nemocascade.rewards import base, pool as pool_lib, registry
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer.onpolicy import rewarders

PLUGIN = "tests.rewards.plugin_rewards"
EXAMPLE = tasks_base.Example("u", "chat", 0, "Say hi.", "", "", {})


def test_plugin_resolves_by_name_and_wraps_numbers():
    fn = registry.get(f"{PLUGIN}:answer_length")
    assert fn("", "<think>\nlong thoughts\n</think>\n\nhi", EXAMPLE) == base.RewardResult(
        1.0, {"length": 2}
    )
    assert registry.get(f"{PLUGIN}:half")("", "x", EXAMPLE) == base.RewardResult(0.5)
    with pytest.raises(TypeError, match="returned str"):
        registry.get(f"{PLUGIN}:returns_text")("", "x", EXAMPLE)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "expected 'package.module:function'"),
        ("tests.rewards.no_such_module:f", "cannot import"),
        (f"{PLUGIN}:missing", "has no function 'missing'"),
        (f"{PLUGIN}:NOT_A_FUNCTION", "has no function"),
    ],
)
def test_bad_plugin_fails_config_validation(spec, message):
    cd = stage2_medium.get_config("tiny")
    cd.rl.reward_fn = spec
    with pytest.raises(config_lib.ConfigError, match=rf"config\.rl\.reward_fn: .*{message}"):
        config_lib.from_config_dict(cd)


def test_plugin_and_reward_are_exclusive():
    cd = stage2_medium.get_config("tiny")
    cd.rl.reward_fn = f"{PLUGIN}:half"
    assert config_lib.from_config_dict(cd).rl.reward_fn == f"{PLUGIN}:half"
    cd.rl.reward = "math"
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.reward_fn and"):
        config_lib.from_config_dict(cd)


def test_rewarder_runs_plugin_in_the_pool_with_its_timeout():
    rl = config_lib.RLConfig(
        domains=("math", "if"),
        reward_fn=f"{PLUGIN}:hangs",
        verifier_workers=1,
        verifier_timeout_s=3.0,
    )
    examples = [
        tasks_base.Example("a", "math", 0, "p", "", "", {"answer": "1"}),
        tasks_base.Example("b", "if", 0, "q", "", "", {}),
    ]
    rollouts = types.SimpleNamespace(
        example_index=np.array([0, 1, 0]), completions=["fine", "hang", "fine"]
    )
    rewarder = rewarders.VerifierRewarder(rl)
    try:
        scores = rewarder(examples, rollouts)
    finally:
        rewarder.close()
    np.testing.assert_array_equal(scores, [1.0, 0.0, 1.0])


def test_pool_fails_fast_on_a_bad_plugin_name():
    with pytest.raises(ValueError, match="cannot import"):
        pool_lib.VerifierPool(num_workers=0).score(["tests.rewards.nope:f"], [""], [""], [EXAMPLE])
