"""Orbax checkpoints: train state + data-iterator position, and stage hand-off.

Resume order (first that exists wins):
  1. the stage's own `workdir/<stage>/checkpoints` (a restarted run continues),
  2. `init.resume_from` (a full train state elsewhere),
  3. `init.init_from` (params exported by a previous stage; fresh optimizer),
  4. scratch.
A finished stage exports its params to `workdir/<stage>/export` and writes
`workdir/<stage>/DONE`, which the cascade uses to skip finished stages.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

DONE_FILE = "DONE"


class Manager:
    """Saves/restores `{state, data}` every N steps, keeping the latest K."""

    def __init__(self, directory: str, *, keep: int = 2, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        self._mngr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=True
            ),
        )

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def save(self, step: int, state: Any, data_state: dict | None = None, *, force=False):
        args = {"state": ocp.args.StandardSave(state)}
        args["data"] = ocp.args.JsonSave(data_state or {})
        self._mngr.save(step, args=ocp.args.Composite(**args), force=force)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        step = self.latest_step() if step is None else step
        restored = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], dict(restored["data"] or {})

    def wait(self):
        self._mngr.wait_until_finished()

    def close(self):
        self._mngr.wait_until_finished()
        self._mngr.close()


def export_params(stage_dir: str, params: Any, info: dict | None = None):
    """Writes the stage's final params (the next stage's `init_from`) and DONE."""
    path = os.path.join(os.path.abspath(stage_dir), "export")
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, params, force=True)
    ckptr.wait_until_finished()
    if jax.process_index() == 0:
        with open(os.path.join(stage_dir, DONE_FILE), "w") as f:
            json.dump(info or {}, f)


def is_done(stage_dir: str) -> bool:
    return os.path.exists(os.path.join(stage_dir, DONE_FILE))


def resolve_params_dir(path: str) -> str:
    """Accepts a stage dir (…/sft), its export dir, or an orbax params dir."""
    path = os.path.abspath(path)
    for candidate in (os.path.join(path, "export"), path):
        if os.path.isdir(candidate) and (
            os.path.exists(os.path.join(candidate, "_METADATA"))
            or os.path.exists(os.path.join(candidate, "_CHECKPOINT_METADATA"))
        ):
            return candidate
    raise FileNotFoundError(
        f"no exported params under {path!r} (expected {path}/export written by a finished stage)"
    )


def load_params(path: str, abstract_params: Any) -> Any:
    """Restores exported params into the given (sharded) abstract layout."""
    ckptr = ocp.StandardCheckpointer()
    return ckptr.restore(resolve_params_dir(path), abstract_params)


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
        state, data = manager.restore(abstract_state)
        return state, data, f"own checkpoint step {manager.latest_step()}"
    if resume_from:
        other = Manager(resume_from, async_save=False)
        if other.latest_step() is None:
            raise FileNotFoundError(f"config.init.resume_from={resume_from!r} has no checkpoint")
        state, data = other.restore(abstract_state)
        other.close()
        return state, data, f"resume_from {resume_from}"
    if init_from:
        params = load_params(init_from, abstract_state.params)
        logging.info("initialized params from %s", init_from)
        return with_params(params), {}, f"init_from {init_from}"
    return init_fresh(), {}, "scratch"
