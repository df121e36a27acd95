"""Chaos: kill -9 during a checkpoint save, corrupt the newest checkpoint, resume bit-identical.

A child process trains the toy SFT config and SIGKILLs itself during the
step-6 save (right after dispatching the async write, or a moment later when
the write may have finished). The newest complete checkpoint left on disk is
then zeroed, so the rerun must skip it with a warning, fall back to the one
before, replay the steps from there and end with exactly the params and
metrics of an uninterrupted run, with one metrics row per step.
"""

import glob
import os
import signal
import subprocess
import sys
import time

import chex
import pytest

from nemocascade import checkpointing, metrics
from nemocascade.trainer.stages import sft
from tests.trainer import test_resume

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS, KILL_AT = 8, 6  # checkpoints every 2 steps, keep 2

_CHILD = """
import os, signal, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
jax.config.update("jax_num_cpu_devices", 8)  # as tests/conftest.py: the same numerics
from nemocascade import checkpointing
from nemocascade.trainer.stages import sft
from tests.trainer import test_chaos, test_resume
workdir, delay = sys.argv[1], float(sys.argv[2])
real_save = checkpointing.Manager.save
def save(self, step, state, data_state=None, *, force=False):
    real_save(self, step, state, data_state, force=force)
    if step == test_chaos.KILL_AT:
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGKILL)
checkpointing.Manager.save = save
sft.run(test_resume._cfg(test_chaos.STEPS), workdir)
"""


def _complete_steps(directory) -> list[int]:
    names = [n for n in os.listdir(directory) if n.isdigit()]
    return sorted(int(n) for n in names if not checkpointing.incomplete(f"{directory}/{n}"))


def _zero_data(step_dir):
    for path in glob.glob(f"{step_dir}/state/ocdbt.process_0/d/*"):
        size = os.path.getsize(path)
        with open(path, "wb") as f:
            f.write(b"\0" * size)


def _losses(stage_dir) -> list[tuple[int, float]]:
    rows = metrics.read(os.path.join(stage_dir, "metrics.jsonl"))
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("full")
    cfg = test_resume._cfg(STEPS)
    sft.run(cfg, str(workdir))
    return workdir, cfg


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_kill_during_save_and_corrupt_newest_resumes_bit_identical(
    tmp_path, uninterrupted, caplog, delay
):
    full, cfg = uninterrupted
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(delay)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    stage_dir = tmp_path / "sft"
    ckpt_dir = stage_dir / "checkpoints"
    complete = _complete_steps(ckpt_dir)
    if delay == 0.0:  # killed while the step-6 write was in flight
        assert KILL_AT not in complete, os.listdir(ckpt_dir)
    assert len(complete) >= 2, complete
    newest, previous = complete[-1], complete[-2]
    _zero_data(ckpt_dir / str(newest))

    t0 = time.perf_counter()
    sft.run(cfg, str(tmp_path))  # the same command again
    assert f"checkpoint {ckpt_dir / str(newest)} is unusable" in caplog.text
    assert os.path.isdir(f"{ckpt_dir}.corrupt/{newest}")
    assert checkpointing.is_done(str(stage_dir))
    chex.assert_trees_all_equal(test_resume._params(full, cfg), test_resume._params(tmp_path, cfg))
    # One row per step, the replayed ones equal to the uninterrupted run's.
    assert _losses(stage_dir) == _losses(full / "sft")
    assert [s for s, _ in _losses(stage_dir)] == list(range(1, STEPS + 1))
    print(
        f"delay {delay}s: complete {complete}, resumed from {previous}, "
        f"rerun {time.perf_counter() - t0:.1f}s"
    )
