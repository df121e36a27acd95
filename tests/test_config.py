"""Config files validate at every size; `config.rl.teachers` (MOPD) parsing and errors."""

import importlib
import os
import subprocess
import sys

import pytest

from configs import mopd as mopd_config
from nemocascade import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_parse_teachers():
    assert config_lib.parse_teachers("") == {}
    assert config_lib.parse_teachers(" math=/a , if=/b/c,code=/a,") == {
        "math": "/a",
        "if": "/b/c",
        "code": "/a",
    }
    assert config_lib.parse_teachers("swe/instruct=/a,swe=/b") == {
        "swe/instruct": "/a",
        "swe": "/b",
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("math", r"config\.rl\.teachers: expected 'domain\[/mode\]=dir"),
        ("math=", r"config\.rl\.teachers: expected"),
        ("=/a", r"config\.rl\.teachers: expected"),
        ("algebra=/a", r"config\.rl\.teachers has domain 'algebra'"),
        ("math=/a,math=/b", r"config\.rl\.teachers names 'math' twice"),
        ("math/fast=/a", r"config\.rl\.teachers key 'math/fast': the mode after '/'"),
        ("maths/instruct=/a", r"config\.rl\.teachers has domain 'maths'"),
    ],
)
def test_bad_teachers_fail_validation(text, message):
    cd = mopd_config.get_config("tiny")
    cd.rl.teachers = text
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.from_config_dict(cd)


@pytest.mark.parametrize("weights", [(1.0, 2.0), (1.0, 0.0, 1.0, 1.0)])
def test_domain_weights_need_one_positive_weight_per_domain(weights):
    cd = mopd_config.get_config("tiny")
    cd.rl.domain_weights = weights
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.domain_weights"):
        config_lib.from_config_dict(cd)
    cd.rl.domain_weights = (4.0, 1.0, 1.0, 1.0)
    assert config_lib.from_config_dict(cd).rl.domain_weights == (4.0, 1.0, 1.0, 1.0)
    cd.data.files = ("/data/prompts.jsonl",)  # weights apply to the built-in world only
    with pytest.raises(config_lib.ConfigError, match=r"config\.data\.files"):
        config_lib.from_config_dict(cd)


def test_mopd_configs_validate_with_paper_warmup():
    for size in ("tiny", "8b", "14b"):
        cfg = config_lib.from_config_dict(mopd_config.get_config(size))
        assert cfg.rl.teachers == ""
        assert cfg.optim.warmup_init_ratio == pytest.approx(0.1)
    big = config_lib.from_config_dict(mopd_config.get_config("8b"))
    assert (big.optim.lr, big.optim.warmup_steps, big.rl.group_size) == (2e-6, 30, 4)


_SHIM = """
from absl import app
from nemocascade import main
from nemocascade.trainer import dispatch
dispatch.run = lambda cfg, workdir: print("TEACHERS " + cfg.rl.teachers)
app.run(main.main)
"""


def _main(teachers: str, tmp_path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", _SHIM, "--config=configs/mopd.py:tiny"]
    argv += [f"--workdir={tmp_path}", f"--config.rl.teachers={teachers}"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)


def test_teachers_from_the_command_line(tmp_path):
    ok = _main("math=/runs/sft,if=/runs/stage1_short", tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "TEACHERS math=/runs/sft,if=/runs/stage1_short" in ok.stdout
    bad = _main("math:/runs/sft", tmp_path)
    assert bad.returncode != 0
    assert "config error: config.rl.teachers: expected 'domain[/mode]=dir" in bad.stderr


@pytest.mark.parametrize("size", ["tiny", "small", "8b", "14b"])
@pytest.mark.parametrize(
    "name",
    ["sft", "rm", "rlhf", "stage1_short", "stage2_medium", "stage3_long", "mopd", "mopd_final"],
)
def test_every_config_file_validates_at_every_size(name, size):
    module = importlib.import_module(f"configs.{name}")
    cfg = config_lib.from_config_dict(module.get_config(size))
    assert cfg.train.seq_len <= cfg.model.max_seq_len
