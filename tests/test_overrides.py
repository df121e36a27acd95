"""Dotted overrides: parsing, unknown-field messages, typing, and flags that main reads back."""

import pytest
from absl import flags
from ml_collections import config_flags

from nemocascade import config as config_lib, overrides

STAGE2 = "configs/stage2_medium.py:tiny"


@pytest.fixture(scope="module")
def base():
    return overrides.load_config_file(STAGE2)


def test_split_top_level_keeps_brackets_and_quotes():
    assert overrides.split_top_level("1e-6, 3e-6", ",") == ["1e-6", "3e-6"]
    assert overrides.split_top_level("('a','b'),('c',)", ",") == ["('a','b')", "('c',)"]
    assert overrides.split_top_level("'x,y',[1, 2]", ",") == ["'x,y'", "[1, 2]"]
    assert overrides.split_top_level("a=1;b=(1;2)", ";") == ["a=1", "b=(1;2)"]


def test_parse_values_are_literals_else_strings():
    text = "optim.lr=1e-6,3e-6; rl.kl_kind=k1,k3;eval.domains=('math',),('if','code')"
    got = overrides.parse(text)
    assert got == [
        ("optim.lr", [1e-6, 3e-6]),
        ("rl.kl_kind", ["k1", "k3"]),
        ("eval.domains", [("math",), ("if", "code")]),
    ]
    assert overrides.parse("config.train.progress=False;init.init_from=/tmp/nc/sft") == [
        ("train.progress", [False]),
        ("init.init_from", ["/tmp/nc/sft"]),
    ]
    assert overrides.parse("") == []


@pytest.mark.parametrize(
    "text, message",
    [
        ("optim.lr", "expected 'section.field=value"),
        ("optim.lr=", "expected 'section.field=value"),
        ("optim.lr=1,,2", "empty value"),
        ("optim.lr=1;optim.lr=2", "config.optim.lr is given twice"),
    ],
)
def test_parse_rejects_malformed_text(text, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        overrides.parse(text)


def test_parse_single_wants_one_value():
    assert overrides.parse_single("train.steps=3;eval.modes=('thinking',)") == {
        "train.steps": 3,
        "eval.modes": ("thinking",),
    }
    with pytest.raises(config_lib.ConfigError, match="config.eval.modes takes one value"):
        overrides.parse_single("eval.modes=thinking,instruct")


@pytest.mark.parametrize(
    "key, message",
    [
        ("rl.lr", "unknown field config.rl.lr (did you mean config.optim.lr?)"),
        ("rl.group_sze", "unknown field config.rl.group_sze (did you mean config.rl.group_size?)"),
        ("optimizer.lr", "unknown field config.optimizer.lr (did you mean config.optim.lr?)"),
        ("zzz.qqq", "unknown field config.zzz.qqq"),
        ("rl.lr.x", "unknown field config.rl.lr.x"),
        ("rl", "config.rl is a section; set one of its fields"),
    ],
)
def test_unknown_fields_are_named_with_a_suggestion(base, key, message):
    with pytest.raises(config_lib.ConfigError) as e:
        overrides.apply(base, {key: 1})
    assert str(e.value) == message


def test_apply_copies_types_and_validates(base):
    cfg = overrides.build(
        base,
        {"optim.lr": 1, "rl.group_size": 4, "eval.domains": "math", "model.d_model": 64},
    )
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.rl.group_size == 4
    assert cfg.eval.domains == ("math",)  # a bare string is a 1-tuple, as on the command line
    assert cfg.model.d_model == 64
    assert base.rl.group_size == 8  # the base is untouched
    with pytest.raises(config_lib.ConfigError, match=r"^config\.rl\.group_size must be int, got 4"):
        overrides.apply(base, {"rl.group_size": 4.5})
    with pytest.raises(config_lib.ConfigError, match=r"^config\.model\.d_model must be int"):
        overrides.apply(base, {"model.d_model": "wide"})
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.group_size must be >= 2"):
        overrides.build(base, {"rl.group_size": 1})
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.kl_kind='k9'"):
        overrides.build(base, {"rl.kl_kind": "k9"})


def test_rendered_flags_parse_back_to_the_same_config(base, tmp_path):
    """What the sweep hands to nemocascade.main is read back as the values it validated."""
    values = {
        "optim.lr": 3e-6,
        "rl.group_size": 4,
        "rl.kl_kind": "k1",
        "rl.clip_high": 0.28,
        "rl.kl_in_reward": True,
        "rl.curriculum": (),
        "eval.domains": ("math", "code"),
        "model.d_model": 64,
        "init.init_from": str(tmp_path / "sft"),
    }
    fv = flags.FlagValues()
    argv = ["prog", f"--config={STAGE2}", *overrides.to_flags(values)]
    holder = config_flags.DEFINE_config_file("config", None, "c", flag_values=fv, sys_argv=argv)
    fv(argv)
    from_flags = config_lib.from_config_dict(holder.value)
    assert from_flags == overrides.build(base, values)


def test_load_config_file_errors():
    with pytest.raises(config_lib.ConfigError, match="no such file"):
        overrides.load_config_file("configs/nope.py:tiny")
    with pytest.raises(config_lib.ConfigError, match="unknown config variant"):
        overrides.load_config_file("configs/sft.py:huge")
