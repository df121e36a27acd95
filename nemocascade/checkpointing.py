"""Orbax checkpoints: train state + data-iterator position, and stage hand-off.

Resume order (first that exists wins):
  1. the stage's own `workdir/<stage>/checkpoints` (a restarted run continues),
  2. `init.resume_from` (a full train state elsewhere),
  3. `init.init_from` (params exported by a previous stage; fresh optimizer),
  4. scratch.
A finished stage exports its params to `workdir/<stage>/export` and writes
`workdir/<stage>/DONE`, which the cascade uses to skip finished stages.

A step directory that is incomplete (no `_CHECKPOINT_METADATA` or orbax's
`commit_success.txt`, an empty file) or fails to restore (truncated or zeroed
data) is skipped with a warning naming it, newest first; once an older step
restores, the skipped newer ones are moved to `checkpoints.corrupt/<step>` so
the resumed run can save those steps again. When no step restores, nothing is
moved and `CheckpointError` lists each step's cause (a changed model config
fails every step the same way, and its checkpoints must stay where they are).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

DONE_FILE = "DONE"
COMMIT_FILE = "commit_success.txt"  # orbax writes it last, before the final rename
STEP_METADATA = "_CHECKPOINT_METADATA"


class CheckpointError(RuntimeError):
    """No usable checkpoint or export where one was expected; the message names the path."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """`Type: first line` of the innermost cause of `e`, cut to `limit` characters.

    orbax re-raises tensorstore's errors as "error while reading array index …";
    the innermost one says what is wrong with which file.
    """
    while True:
        inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if inner is None:
            break
        e = inner
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def check_space(directory: str, state: Any) -> None:
    """Raises ENOSPC before a save that cannot fit, instead of failing inside orbax.

    The need is this process's share of the state's raw bytes (orbax's
    compression can only make the checkpoint smaller). A disk that fills up
    during the save still fails there, and the entry point's one-line error
    reports it too.
    """
    if "://" in directory:  # remote storage: no local disk to measure
        return
    need = sum(getattr(x, "nbytes", 0) for x in jax.tree.leaves(state)) // jax.process_count()
    free = shutil.disk_usage(directory).free
    if free < need:
        raise OSError(
            errno.ENOSPC,
            f"{os.strerror(errno.ENOSPC)}: a checkpoint needs {need / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB free",
            directory,
        )


def incomplete(step_dir: str) -> str | None:
    """Why `step_dir` is not a complete checkpoint (None if it looks complete).

    Cheap structural checks only: the commit marker and step metadata exist,
    no file is empty and the JSON metadata parses (the last two on local disks
    only: listing a bucket costs more than the restore that follows). Zeroed or
    truncated array data is caught by the restore.
    """
    for marker in (COMMIT_FILE, STEP_METADATA):
        if not (epath.Path(step_dir) / marker).exists():
            return f"no {marker} (the save did not finish)"
    return damaged_files(step_dir)


def damaged_files(directory: str) -> str | None:
    """An empty file, or `_METADATA`/`_CHECKPOINT_METADATA` that is not JSON, in `directory`.

    None for a URI (`gs://…`): its files are checked by the restore itself.
    """
    if "://" in directory:
        return None
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            if os.path.getsize(path) == 0:
                return f"empty file {rel}"
            if name in ("_METADATA", STEP_METADATA):
                try:
                    with open(path, "rb") as f:
                        json.loads(f.read().decode("utf-8"))
                except (ValueError, UnicodeDecodeError) as e:
                    return f"{rel} is not valid JSON ({first_line(e, 80)})"
    return None


PROCESSES_KEY = "processes"


def gather_data_states(data_state: dict) -> dict:
    """Every process's data-iterator state, for the checkpoint process 0 writes.

    One process: the state itself. Several: `{"processes": [state of process
    0, 1, ...]}` (each process reads its own disjoint shard of the data, so a
    resumed run must put each one back where it was).
    """
    if jax.process_count() == 1:
        return data_state
    from jax.experimental import multihost_utils

    raw = np.frombuffer(json.dumps(data_state).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.int32(raw.size))
    padded = np.zeros(int(np.max(sizes)), np.uint8)
    padded[: raw.size] = raw
    rows = multihost_utils.process_allgather(padded)
    return {
        PROCESSES_KEY: [
            json.loads(bytes(rows[p, : int(sizes[p])]).decode()) for p in range(len(sizes))
        ]
    }


def own_data_state(saved: dict) -> dict:
    """This process's part of `gather_data_states`' result."""
    if PROCESSES_KEY not in saved:
        return saved
    states = saved[PROCESSES_KEY]
    if len(states) != jax.process_count():
        raise CheckpointError(
            f"the checkpoint holds data positions of {len(states)} processes, this run has "
            f"{jax.process_count()}: resume with the same number of processes"
        )
    return dict(states[jax.process_index()])


class Manager:
    """Saves/restores `{state, data}` every N steps, keeping the latest K."""

    def __init__(self, directory: str, *, keep: int = 2, async_save: bool = True):
        self.directory = absolute(directory)
        self._mngr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=True
            ),
        )

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def reached_preemption(self, step: int) -> bool:
        """orbax's cluster preemption flag at `step` (the same answer on every host)."""
        return self._mngr.reached_preemption(step)

    def save(self, step: int, state: Any, data_state: dict | None = None, *, force=False):
        check_space(self.directory, state)
        args = {"state": ocp.args.StandardSave(state)}
        args["data"] = ocp.args.JsonSave(gather_data_states(data_state or {}))
        self._mngr.save(step, args=ocp.args.Composite(**args), force=force)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        step = self.latest_step() if step is None else step
        restored = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], own_data_state(dict(restored["data"] or {}))

    def step_dir(self, step: int) -> str:
        return f"{self.directory.rstrip('/')}/{step}"

    def restore_latest(
        self, abstract_state: Any, *, move_aside: bool = True
    ) -> tuple[Any, dict, int]:
        """The newest step that restores, skipping (and warning about) broken ones.

        With `move_aside`, the skipped newer steps are moved to
        `<directory>.corrupt/` once an older one has restored (see the module
        docstring); without it (someone else's `resume_from`) nothing moves.
        """
        causes: list[tuple[int, str]] = []
        for step in sorted(self._mngr.all_steps(), reverse=True):
            cause = incomplete(self.step_dir(step))
            if cause is None:
                try:
                    state, data = self.restore(abstract_state, step)
                except Exception as e:  # orbax/tensorstore raise many types for bad bytes
                    cause = first_line(e)
                else:
                    if move_aside:
                        self._move_aside([s for s, _ in causes])
                    return state, data, step
            logging.warning(
                "checkpoint %s is unusable (%s); trying the previous one",
                self.step_dir(step),
                cause,
            )
            causes.append((step, cause))
        listing = "; ".join(f"step {s}: {c}" for s, c in causes) or "no checkpoint"
        raise CheckpointError(
            f"no checkpoint in {self.directory} restores ({listing}); "
            "move that directory away to start the stage from scratch"
        )

    def _move_aside(self, steps: list[int]):
        if not steps:
            return
        if jax.process_index() == 0:
            aside = epath.Path(self.directory.rstrip("/") + ".corrupt")
            aside.mkdir(parents=True, exist_ok=True)
            for step in steps:
                target, n = aside / str(step), 1
                while target.exists():
                    target, n = aside / f"{step}-{n}", n + 1
                epath.Path(self.step_dir(step)).rename(target)
                logging.warning("moved unusable checkpoint %s to %s", self.step_dir(step), target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("checkpointing.move_aside")
        self._mngr.reload()

    def wait(self):
        self._mngr.wait_until_finished()

    def close(self):
        self._mngr.wait_until_finished()
        self._mngr.close()


def absolute(path: str) -> str:
    """A local path made absolute; a URI (`gs://…`, any `etils.epath` scheme) as it is."""
    return path if "://" in path else os.path.abspath(path)


def export_params(stage_dir: str, params: Any, info: dict | None = None):
    """Writes the stage's final params (the next stage's `init_from`) and DONE."""
    path = f"{absolute(stage_dir).rstrip('/')}/export"
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, params, force=True)
    ckptr.wait_until_finished()
    if jax.process_index() == 0:
        (epath.Path(stage_dir) / DONE_FILE).write_text(json.dumps(info or {}))


def is_done(stage_dir: str) -> bool:
    return (epath.Path(stage_dir) / DONE_FILE).exists()


def resolve_params_dir(path: str) -> str:
    """Accepts a stage dir (…/sft), its export dir, or an orbax params dir.

    An export with an empty file or unparsable metadata raises CheckpointError
    here, before anything reads it.
    """
    path = os.path.abspath(path)
    for candidate in (os.path.join(path, "export"), path):
        if os.path.isdir(candidate) and (
            os.path.exists(os.path.join(candidate, "_METADATA"))
            or os.path.exists(os.path.join(candidate, "_CHECKPOINT_METADATA"))
        ):
            damage = damaged_files(candidate)
            if damage:
                raise CheckpointError(f"exported params in {candidate} are damaged: {damage}")
            return candidate
    raise FileNotFoundError(
        f"no exported params under {path!r} (expected {path}/export written by a finished stage)"
    )


def load_params(path: str, abstract_params: Any) -> Any:
    """Restores exported params into the given (sharded) abstract layout.

    A damaged export (truncated, zeroed, another model's shapes) raises
    `CheckpointError` naming the directory and the cause in one line.
    """
    params_dir = resolve_params_dir(path)
    ckptr = ocp.StandardCheckpointer()
    try:
        return ckptr.restore(params_dir, abstract_params)
    except Exception as e:  # orbax/tensorstore raise many types for bad bytes
        raise CheckpointError(f"cannot restore params from {params_dir}: {first_line(e)}") from e


def is_resume(where: str) -> bool:
    """Whether `restore_or_init`'s `where_from` is a resumed run (not a fresh start)."""
    return where.startswith(("own checkpoint", "resume_from"))


def restore_or_init(
    manager: Manager,
    abstract_state: Any,
    *,
    resume_from: str,
    init_from: str,
    init_fresh,
    with_params,
) -> tuple[Any, dict, str]:
    """Applies the resume order; returns (state, data_state, where_from)."""
    if manager.latest_step() is not None:
        state, data, step = manager.restore_latest(abstract_state)
        return state, data, f"own checkpoint step {step}"
    if resume_from:
        other = Manager(resume_from, async_save=False)
        if other.latest_step() is None:
            raise FileNotFoundError(f"config.init.resume_from={resume_from!r} has no checkpoint")
        state, data, step = other.restore_latest(abstract_state, move_aside=False)
        other.close()
        return state, data, f"resume_from {resume_from} step {step}"
    if init_from:
        params = load_params(init_from, abstract_state.params)
        logging.info("initialized params from %s", init_from)
        return with_params(params), {}, f"init_from {init_from}"
    return init_fresh(), {}, "scratch"
