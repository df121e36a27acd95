"""Preemption and profiling at step boundaries (`nemocascade.trainer.preemption`)."""

import os
import signal
import subprocess
import sys
import time

import chex
import jax
import numpy as np
import pytest

from nemocascade import checkpointing, metrics as metrics_lib
from nemocascade.trainer import preemption

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = [
    "--config=configs/sft.py:tiny",
    "--config.model.d_model=32",
    "--config.model.num_layers=1",
    "--config.model.num_heads=2",
    "--config.model.num_kv_heads=1",
    "--config.model.head_dim=16",
    "--config.model.d_ff=64",
    "--config.train.steps=12",
    "--config.train.batch_size=8",
    "--config.train.seq_len=64",
    "--config.train.log_every=1",
    "--config.train.eval_every=100",
    "--config.train.checkpoint_every=100",
    "--config.train.progress=False",
    "--config.data.num_examples=40",
    "--config.data.eval_examples=4",
    "--config.eval.num_per_domain=0",
]


def _main(workdir, *extra) -> subprocess.Popen:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-m", "nemocascade.main", f"--workdir={workdir}", *FLAGS, *extra]
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _steps(workdir) -> list[int]:
    path = os.path.join(workdir, "sft", "metrics.jsonl")
    return (
        [r["step"] for r in metrics_lib.read(path) if "loss" in r] if os.path.exists(path) else []
    )


def _params(workdir):
    return checkpointing.load_params(os.path.join(workdir, "sft"), None)


@pytest.mark.slow
def test_sigterm_saves_and_the_rerun_resumes_bit_identical(tmp_path):
    whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
    assert _main(whole).wait(timeout=600) == 0
    proc = _main(cut)
    deadline = time.time() + 600
    while not _steps(cut) or max(_steps(cut)) < 3:
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == preemption.EXIT_CODE, out[-3000:]
    assert "preempted: saved step" in out
    saved = checkpointing.Manager(os.path.join(cut, "sft", "checkpoints")).latest_step()
    assert saved is not None and 3 <= saved < 12 and not checkpointing.is_done(f"{cut}/sft")
    assert _main(cut).wait(timeout=600) == 0
    assert _steps(cut) == _steps(whole) == list(range(1, 13))  # one row per step
    losses = {
        w: [r["loss"] for r in metrics_lib.read(f"{w}/sft/metrics.jsonl") if "loss" in r]
        for w in (whole, cut)
    }
    np.testing.assert_array_equal(losses[cut], losses[whole])
    chex.assert_trees_all_equal(_params(cut), _params(whole))


def test_profiler_writes_a_trace_of_the_chosen_steps(tmp_path):
    profiler = preemption.Profiler((2, 3), str(tmp_path / "tb"))
    f = jax.jit(lambda x: x @ x)
    x = np.ones((64, 64), np.float32)
    for step in range(1, 5):
        profiler.before(step)
        y = f(x)
        profiler.after(step, y)
    profiler.close()
    traces = [os.path.join(r, n) for r, _, ns in os.walk(tmp_path / "tb") for n in ns]
    assert any(t.endswith(".xplane.pb") for t in traces), traces
    assert all("plugins/profile" in t for t in traces)


def test_watcher_notes_sigterm_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    watcher = preemption.Watcher()
    assert not watcher.requested(1, None)
    os.kill(os.getpid(), signal.SIGTERM)
    assert watcher.requested(1, None)
    watcher.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_requested_asks_the_project_manager_for_a_cluster_preemption(tmp_path, monkeypatch):
    """Multi-process runs poll orbax's flag through `checkpointing.Manager` (no SIGTERM)."""
    manager = checkpointing.Manager(str(tmp_path / "ckpt"), async_save=False)
    assert manager.reached_preemption(3) is False  # no preemption signalled
    watch = preemption.Watcher()
    try:
        monkeypatch.setattr(jax, "process_count", lambda: 2)
        assert watch.requested(3, manager) is False
        monkeypatch.setattr(manager._mngr, "reached_preemption", lambda step: step == 3)
        assert watch.requested(3, manager) is True
    finally:
        watch.close()
