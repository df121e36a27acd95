"""Environment faults end in one line naming the cause; config values are checked by name."""

import errno
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from nemocascade import checkpointing, config as config_lib, errors, overrides

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _wrapped(inner: BaseException) -> BaseException:
    """`inner` as libraries hand it on: raised again as the cause of another error."""
    try:
        try:
            raise inner
        except BaseException as e:
            raise RuntimeError("save failed") from e
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/w/sft/checkpoints"),
            "no space left on device: /w/sft/checkpoints (errno 28, ENOSPC)",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/w/sft"),
            "permission denied: /w/sft (errno 13, EACCES)",
        ),
        (
            NotADirectoryError(errno.ENOTDIR, "Not a directory", "/w/sft"),
            "a path component is a file, not a directory: /w/sft (errno 20, ENOTDIR)",
        ),
        (
            checkpointing.CheckpointError("cannot restore params from /w/sft/export: x"),
            "cannot restore params from /w/sft/export: x",
        ),
        (
            FileNotFoundError("no exported params under '/w/sft'"),
            "no exported params under '/w/sft'",
        ),
        (
            ValueError('RESOURCE_EXHAUSTED: Failed to write "/w/d/1": No space left on device'),
            "no space left on device (ValueError: RESOURCE_EXHAUSTED: Failed to write "
            '"/w/d/1": No space left on device)',
        ),
    ],
)
def test_describe_environment_faults(exc, line):
    assert errors.describe(exc) == line
    assert errors.describe(_wrapped(exc)) == line  # found through the cause chain


def test_describe_leaves_bugs_and_config_errors_alone():
    assert errors.describe(KeyError("params")) is None
    assert errors.describe(_wrapped(ZeroDivisionError())) is None
    assert errors.describe(config_lib.ConfigError("config.optim.lr must be > 0")) is None


def test_one_line_exits_with_the_cause(capsys):
    with pytest.raises(SystemExit) as e, errors.one_line("prog", context="--from=x"):
        raise OSError(errno.ENOSPC, "No space left on device", "/w")
    assert e.value.code == (
        "prog: no space left on device: /w (errno 28, ENOSPC) (--from=x) "
        "[--verbose for the traceback]"
    )
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as e, errors.one_line("prog", verbose=True):
        raise OSError(errno.EROFS, "Read-only file system", "/w")
    assert e.value.code == "prog: read-only file system: /w (errno 30, EROFS)"
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    with pytest.raises(KeyError), errors.one_line("prog"):  # a bug keeps its traceback
        raise KeyError("x")


def test_split_verbose():
    assert errors.split_verbose(["--workdir=w", "--verbose"]) == (["--workdir=w"], True)
    assert errors.split_verbose(["--workdir=w"]) == (["--workdir=w"], False)


def test_check_space_refuses_a_save_that_cannot_fit(tmp_path, monkeypatch):
    state = {"w": jnp.zeros((1024, 256))}  # 1 MiB
    checkpointing.check_space(str(tmp_path), state)
    usage = checkpointing.shutil.disk_usage(str(tmp_path))
    monkeypatch.setattr(
        checkpointing.shutil, "disk_usage", lambda _: usage._replace(free=512 * 1024)
    )
    with pytest.raises(OSError) as e:
        checkpointing.check_space(str(tmp_path), state)
    assert errors.describe(e.value) == (
        f"no space left on device (a checkpoint needs 1.0 MiB, 0.5 MiB free): {tmp_path} "
        "(errno 28, ENOSPC)"
    )


def _cfg(**sections):
    cd = overrides.load_config_file(os.path.join(ROOT, "configs/stage2_medium.py:tiny"))
    for path, value in sections.items():
        section, field = path.split("__")
        cd[section][field] = value
    return cd


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("train__keep_checkpoints", 0, "config.train.keep_checkpoints must be >= 1, got 0"),
        ("optim__weight_decay", -1.0, "config.optim.weight_decay must be >= 0, got -1.0"),
        ("rl__clip_low", -1.0, "config.rl.clip_low must be in [0, 1), got -1.0"),
        ("rl__clip_low", 1.0, "config.rl.clip_low must be in [0, 1), got 1.0"),
        ("rl__clip_high", -0.1, "config.rl.clip_high must be >= 0, got -0.1"),
        ("rl__dual_clip", 0.5, "config.rl.dual_clip must be 0 (off) or > 1, got 0.5"),
        ("rl__kl_coef", -0.1, "config.rl.kl_coef must be >= 0, got -0.1"),
    ],
)
def test_bad_values_are_rejected_by_name(field, value, message):
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.from_config_dict(_cfg(**{field: value}))
    assert str(e.value) == message


def test_tuple_fields_from_a_comma_list():
    cfg = config_lib.from_config_dict(_cfg(data__domains=("math,code",), rl__domains=("if,chat",)))
    assert cfg.data.domains == ("math", "code") and cfg.rl.domains == ("if", "chat")


def _main(*args, workdir):
    argv = [sys.executable, "-m", "nemocascade.main", "--config=configs/sft.py:tiny"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [*argv, f"--workdir={workdir}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_main_one_line_errors(tmp_path):
    """Through the real entry point: each case fails before a step, in one line."""
    p = _main("--config.train.keep_checkpoints=0", workdir=tmp_path)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        "config error: config.train.keep_checkpoints must be >= 1, got 0"
    )
    (tmp_path / "a_file").write_text("")
    # The comma list passes validation (it failed as the domain 'math,code'), so the
    # run gets as far as creating the stage directory inside a file.
    p = _main(
        "--config.data.domains=math,code",
        "--config.data.domain_weights=3,1",
        workdir=tmp_path / "a_file",
    )
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"nemocascade.main: a path component is a file, not a directory: {tmp_path}/a_file/sft "
        "(errno 20, ENOTDIR) [--verbose for the traceback]"
    )
    assert "Traceback" not in p.stderr
