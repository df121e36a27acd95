"""Run logging: `metrics.jsonl`, TensorBoard events, a console progress bar.

Only process 0 writes. Values are pulled to the host by the caller at log
steps only (pulling every step would serialize dispatch).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import jax
import numpy as np
import tqdm

try:
    from tensorboardX import SummaryWriter
except ImportError:  # pragma: no cover - tensorboardX is a declared dependency
    SummaryWriter = None


def to_python(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        v = np.asarray(jax.device_get(v))
        out[k] = float(v) if v.size == 1 else v.tolist()
    return out


class Writer:
    """Appends one JSON object per log step and mirrors scalars to TensorBoard.

    A resumed run replays the steps after its checkpoint, in order, so the
    first row a Writer writes marks where the replay begins: before writing
    it, rows of an earlier, interrupted run at or after that step are dropped
    from metrics.jsonl (they are about to be written again), and the file
    never holds two rows of one step from two runs.
    """

    def __init__(self, directory: str, *, tensorboard: bool = True, wandb: dict | None = None):
        """`wandb`: `wandb.init` keyword arguments (project, name, mode, config) or None."""
        self.enabled = jax.process_index() == 0
        self.path = os.path.join(directory, "metrics.jsonl")
        self._replay_checked = False
        self._tb = None
        self._wandb = None
        if self.enabled:
            os.makedirs(directory, exist_ok=True)
            if tensorboard and SummaryWriter is not None:
                self._tb = SummaryWriter(os.path.join(directory, "tb"))
            if wandb:
                self._wandb = _wandb_run(directory, wandb)

    def text(self, tag: str, text: str) -> None:
        """A text record in TensorBoard (e.g. the resolved config)."""
        if self._tb is not None:
            self._tb.add_text(tag, text)
            self._tb.flush()

    def write(self, step: int, metrics: dict[str, Any]):
        if not self.enabled:
            return
        record = {"step": int(step), **to_python(metrics)}
        if not self._replay_checked:
            drop_from(self.path, int(step))
            self._replay_checked = True
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, float) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            scalars = {k: v for k, v in record.items() if isinstance(v, (int, float))}
            self._wandb.log(scalars, step=int(step))

    def close(self):
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _wandb_run(directory: str, kwargs: dict):
    """A Weights & Biases run beside TensorBoard; one id per stage dir, so a resume continues it."""
    try:
        import wandb
    except ImportError:
        raise ImportError(
            "config.train.wandb_project is set but wandb is not installed (pip install wandb)"
        ) from None
    import hashlib

    run_id = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:16]
    return wandb.init(dir=directory, id=run_id, resume="allow", reinit=True, **kwargs)


def drop_from(path: str, step: int) -> int:
    """Rewrites metrics.jsonl without rows of step >= `step`; returns how many were dropped.

    A torn last line (a kill mid-write) is dropped too. The new file replaces
    the old one by rename, so a kill here leaves one or the other.
    """
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        lines = f.readlines()
    keep = []
    for line in lines:
        try:
            if json.loads(line)["step"] < step:
                keep.append(line if line.endswith("\n") else line + "\n")
        except (ValueError, KeyError, TypeError):
            pass  # blank or torn line
    dropped = sum(1 for line in lines if line.strip()) - len(keep)
    if dropped:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(keep)
        os.replace(tmp, path)
    return dropped


def read(path: str) -> list[dict]:
    """All records of a metrics.jsonl file (empty if missing)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Progress:
    """tqdm bar with the latest loss and throughput; silent when disabled."""

    def __init__(self, total: int, initial: int, desc: str, enabled: bool = True):
        self._bar = tqdm.tqdm(
            total=total,
            initial=initial,
            desc=desc,
            dynamic_ncols=True,
            disable=not enabled or jax.process_index() != 0,
            mininterval=1.0,
        )

    def update(self, n: int = 1, **postfix):
        if postfix:
            self._bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)
        self._bar.update(n)

    def write(self, msg: str):
        self._bar.write(msg)

    def close(self):
        self._bar.close()


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else v


class Throughput:
    """Tokens/s and model FLOP/s between two log steps."""

    def __init__(self, flops_per_token: float):
        self.flops_per_token = flops_per_token
        self._t = time.perf_counter()
        self._tokens = 0.0

    def add(self, tokens: float):
        self._tokens += tokens

    def measure(self) -> dict[str, float]:
        now = time.perf_counter()
        dt = max(now - self._t, 1e-9)
        tps = self._tokens / dt
        self._t, self._tokens = now, 0.0
        return {"tokens_per_s": tps, "model_flops_per_s": tps * self.flops_per_token}
