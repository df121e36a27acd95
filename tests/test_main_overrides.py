"""`--config.section.field=value` through `nemocascade.main`: values arrive typed, bad ones stop it.

Each case runs main's real flag parsing and config validation in a fresh
process, with the stage runner replaced by one that prints the config it
would have trained with, so nothing compiles.
"""

import json
import os
import subprocess
import sys

import pytest

from nemocascade import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHIM = """
import json, sys
from absl import app
from nemocascade import main
from nemocascade.trainer import dispatch
def report(cfg, workdir):
    print("CFG " + json.dumps({"lr": cfg.optim.lr, "group_size": cfg.rl.group_size,
        "kl_kind": cfg.rl.kl_kind, "domains": cfg.rl.domains, "progress": cfg.train.progress,
        "curriculum": len(cfg.rl.curriculum), "d_model": cfg.model.d_model, "workdir": workdir}))
dispatch.run = report
app.run(main.main, flags_parser=main._parse_flags)
"""


def _main(*args, workdir):
    argv = [sys.executable, "-c", _SHIM, "--config=configs/stage2_medium.py:tiny"]
    argv += [f"--workdir={workdir}", *args]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)


def _config(out: str) -> dict:
    (line,) = [x for x in out.splitlines() if x.startswith("CFG ")]
    return json.loads(line[4:])


def test_overrides_reach_the_typed_config(tmp_path):
    p = _main(
        "--config.optim.lr=3e-6",
        "--config.rl.group_size=4",
        "--config.rl.kl_kind=k1",
        "--config.rl.domains=('math','code')",
        "--config.train.progress=False",
        "--config.rl.curriculum=()",
        "--config.model.d_model=64",
        workdir=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert _config(p.stdout) == {
        "lr": 3e-6,
        "group_size": 4,
        "kl_kind": "k1",
        "domains": ["math", "code"],
        "progress": False,
        "curriculum": 0,
        "d_model": 64,
        "workdir": str(tmp_path),
    }


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--config.rl.group_size=1", "config error: config.rl.group_size must be >= 2, got 1"),
        (
            "--config.rl.kl_kind=k9",
            "config error: config.rl.kl_kind='k9'; choose from ('k1', 'k2', 'k3')",
        ),
        ("--config.optim.lr=-1.0", "config error: config.optim.lr must be > 0, got -1.0"),
    ],
)
def test_bad_values_stop_with_one_line_naming_the_field(tmp_path, flag, message):
    p = _main(flag, workdir=tmp_path)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == message
    assert "CFG " not in p.stdout  # the stage runner never started


def test_unknown_field_stops_before_anything_runs(tmp_path):
    p = _main("--config.rl.lr=1e-6", workdir=tmp_path)
    assert p.returncode != 0
    assert "CFG " not in p.stdout
    assert "Traceback" not in p.stderr


def test_unknown_field_message_names_the_path(tmp_path):
    p = _main("--config.rl.lr=1e-6", workdir=tmp_path)
    assert p.stderr.strip().splitlines()[-1] == (
        "config error: unknown field config.rl.lr (did you mean config.optim.lr?)"
    )


def test_from_config_dict_names_an_unknown_field():
    """The typed-config boundary rejects a field the flag parser would let through unlocked."""
    from configs import stage2_medium

    cd = stage2_medium.get_config("tiny")
    cd.rl.lr = 1e-6
    with pytest.raises(config_lib.ConfigError, match=r"unknown field\(s\) \['config\.rl\.lr'\]"):
        config_lib.from_config_dict(cd)
