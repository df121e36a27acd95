"""The stage registry: every stage has a runner and a config file; orders name known stages."""

import importlib
import os

import pytest

from nemocascade import config as config_lib, stage_registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", stage_registry.NAMES)
def test_every_stage_has_a_runner_and_a_config_file(name):
    stage = stage_registry.get(name)
    assert callable(importlib.import_module(stage.runner).run)
    assert os.path.isfile(os.path.join(ROOT, "configs", f"{name}.py"))


def test_roles_of_the_launch_names_and_orders():
    roles = {
        n: stage_registry.get(n).role for n in ("stage1_short", "stage2_medium", "stage3_long")
    }
    assert roles == {"stage1_short": "IF-RL", "stage2_medium": "math RL", "stage3_long": "code RL"}
    for order in stage_registry.ORDERS.values():
        assert order[0] == "sft" and set(order) <= set(stage_registry.NAMES)
    assert stage_registry.chain("c2") == stage_registry.ORDERS["c2"]
    # The recipes append a final MOPD; C2 already has one, so its last is `mopd_final`.
    assert stage_registry.ORDERS["c1_mopd"] == (*stage_registry.ORDERS["c1"], "mopd")
    assert stage_registry.ORDERS["c2_mopd"] == (*stage_registry.ORDERS["c2"], "mopd_final")
    assert stage_registry.get("mopd_final").kind == stage_registry.get("mopd").kind == "distill"
    assert stage_registry.chain("c1", ("sft", "rm")) == ("sft", "rm")
    assert stage_registry.label("stage2_medium") == "stage2_medium [math RL]"
    assert [n for n in stage_registry.NAMES if stage_registry.get(n).side] == ["rm"]
    with pytest.raises(KeyError, match="unknown stage"):
        stage_registry.get("stage9")


def test_the_config_takes_its_stage_names_and_orders_from_the_registry():
    assert config_lib.STAGES == stage_registry.NAMES
    with pytest.raises(config_lib.ConfigError, match=r"config\.cascade\.order"):
        config_lib.validate(config_lib.Config(stage="cascade", model=_model(), cascade=_c("c3")))
    with pytest.raises(config_lib.ConfigError, match=r"config\.cascade\.stages"):
        config_lib.validate(
            config_lib.Config(stage="cascade", model=_model(), cascade=_c("c1", ("sft", "rl9")))
        )


def _model():
    from nemocascade.model import presets

    return presets.get_preset("tiny")


def _c(order, stages=()):
    return config_lib.CascadeConfig(order=order, stages=stages)
