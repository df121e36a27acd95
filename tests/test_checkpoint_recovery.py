"""A broken newest checkpoint is skipped for the previous one; metrics rows are not doubled."""

import glob
import json
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade import checkpointing, metrics

STATE = {"a": jnp.arange(1000.0), "b": jnp.ones((30, 30))}
ABSTRACT = jax.eval_shape(lambda: STATE)


def _saved(directory, steps=(2, 4)) -> checkpointing.Manager:
    m = checkpointing.Manager(str(directory), keep=3, async_save=False)
    for s in steps:
        m.save(s, jax.tree.map(lambda x, s=s: x * s, STATE), {"pos": s})
    m.wait()
    return m


def _data_files(step_dir):
    return sorted(glob.glob(f"{step_dir}/state/ocdbt.process_0/d/*"), key=os.path.getsize)


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _zero(path):
    n = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\0" * n)


CORRUPTIONS = {
    "truncated data": lambda d: _truncate(_data_files(d)[-1]),
    "zeroed data": lambda d: [_zero(p) for p in _data_files(d)],
    "zeroed metadata": lambda d: _zero(f"{d}/state/_METADATA"),
    "no commit marker": lambda d: os.remove(f"{d}/{checkpointing.COMMIT_FILE}"),
    "empty file": lambda d: open(f"{d}/data/metadata", "w").close(),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_broken_newest_falls_back_to_previous(tmp_path, caplog, how):
    directory = tmp_path / "checkpoints"
    _saved(directory).close()
    CORRUPTIONS[how](str(directory / "4"))

    m = checkpointing.Manager(str(directory), keep=3, async_save=False)
    with caplog.at_level(logging.WARNING):
        state, data, step = m.restore_latest(ABSTRACT)
    assert step == 2 and data == {"pos": 2}
    np.testing.assert_array_equal(state["a"], np.arange(1000.0) * 2)
    assert f"checkpoint {directory / '4'} is unusable" in caplog.text
    # Moved aside, so the resumed run saves step 4 again.
    assert os.path.isdir(f"{directory}.corrupt/4") and not os.path.exists(directory / "4")
    assert m.latest_step() == 2
    m.save(4, STATE, {"pos": 4}, force=True)
    m.wait()
    state, data, step = m.restore_latest(ABSTRACT)
    assert step == 4 and data == {"pos": 4}
    m.close()


def test_no_restorable_checkpoint_is_an_error_and_moves_nothing(tmp_path):
    directory = tmp_path / "checkpoints"
    _saved(directory).close()
    for s in ("2", "4"):
        CORRUPTIONS["zeroed data"](str(directory / s))
    m = checkpointing.Manager(str(directory), keep=3, async_save=False)
    with pytest.raises(checkpointing.CheckpointError) as e:
        m.restore_latest(ABSTRACT)
    msg = str(e.value)
    assert msg.startswith(f"no checkpoint in {directory} restores (step 4: ")
    assert "; step 2: " in msg and "\n" not in msg
    assert msg.endswith("; move that directory away to start the stage from scratch")
    assert sorted(os.listdir(directory)) == ["2", "4"]
    m.close()


def test_resume_from_falls_back_without_moving(tmp_path):
    other = tmp_path / "other"
    _saved(other).close()
    CORRUPTIONS["truncated data"](str(other / "4"))
    own = checkpointing.Manager(str(tmp_path / "own"), keep=2, async_save=False)
    state, data, where = checkpointing.restore_or_init(
        own,
        ABSTRACT,
        resume_from=str(other),
        init_from="",
        init_fresh=None,
        with_params=None,
    )
    assert where == f"resume_from {other} step 2" and data == {"pos": 2}
    assert sorted(os.listdir(other)) == ["2", "4"]
    own.close()


def test_damaged_export_is_one_line(tmp_path):
    stage = tmp_path / "sft"
    checkpointing.export_params(str(stage), STATE)
    for p in glob.glob(f"{stage}/export/ocdbt.process_0/d/*"):
        _zero(p)
    with pytest.raises(checkpointing.CheckpointError) as e:
        checkpointing.load_params(str(stage), ABSTRACT)
    assert str(e.value).startswith(f"cannot restore params from {stage}/export: ")
    assert "\n" not in str(e.value)


def test_damaged_export_metadata_is_caught_before_reading(tmp_path):
    stage = tmp_path / "sft"
    checkpointing.export_params(str(stage), STATE)
    _zero(f"{stage}/export/_METADATA")
    with pytest.raises(checkpointing.CheckpointError) as e:
        checkpointing.resolve_params_dir(str(stage))
    assert str(e.value) == (
        f"exported params in {stage}/export are damaged: _METADATA is not valid JSON "
        "(JSONDecodeError: Expecting value: line 1 column 1 (char 0))"
    )


def test_writer_drops_replayed_rows(tmp_path):
    w = metrics.Writer(str(tmp_path), tensorboard=False)
    for s in range(1, 6):
        w.write(s, {"loss": float(s)})
    with open(w.path, "a") as f:
        f.write('{"step": 6, "lo')  # killed mid-write
    # Resumed from the step-3 checkpoint: the new run's first row is step 4.
    w = metrics.Writer(str(tmp_path), tensorboard=False)
    w.write(4, {"loss": 40.0})
    w.write(5, {"loss": 50.0})
    rows = metrics.read(w.path)
    assert [(r["step"], r["loss"]) for r in rows] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
        (5, 50.0),
    ]
    # Only the first row of a Writer checks: a second row of a step (its eval) is kept.
    w.write(5, {"eval": 1.0})
    with open(w.path) as f:
        assert json.loads(f.readlines()[-1]) == {"step": 5, "eval": 1.0}


def test_incomplete_on_a_uri(tmp_path, monkeypatch):
    """Bucket step dirs: the markers are looked up through epath (no local-only os calls)."""
    from etils import epath
    from etils.epath import testing as epath_testing

    monkeypatch.chdir(tmp_path)
    with epath_testing.mock_epath():
        step_dir = "gs://bucket/run/sft/checkpoints/4"
        epath.Path(step_dir).mkdir(parents=True)
        assert (
            checkpointing.incomplete(step_dir) == "no commit_success.txt (the save did not finish)"
        )
        for marker in (checkpointing.COMMIT_FILE, checkpointing.STEP_METADATA):
            (epath.Path(step_dir) / marker).write_text("{}")
        assert checkpointing.incomplete(step_dir) is None
