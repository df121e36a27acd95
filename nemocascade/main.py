"""Entry point: `python -m nemocascade.main --config=configs/<stage>.py[:ARG] --workdir=DIR`.

Parses flags, initializes multi-host JAX when launched that way, validates the
config (failing before any compile with a message naming the field) and hands
off to the stage named by `config.stage`.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags
from ml_collections import config_flags

_DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "cascade.py")

_CONFIG = config_flags.DEFINE_config_file(
    "config", f"{_DEFAULT_CONFIG}:tiny", "Config file, e.g. configs/sft.py:tiny.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/nemocascade", "Output directory of the run.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in a multi-host run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", None, "Call jax.distributed.initialize() (default: auto on TPU pods/SLURM)."
)


def _maybe_initialize_distributed():
    import jax

    explicit = _COORDINATOR.value is not None
    auto = _DISTRIBUTED.value
    if auto is None:
        auto = "SLURM_JOB_ID" in os.environ or "TPU_WORKER_HOSTNAMES" in os.environ
    if explicit:
        if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
            # CPU processes exchange collectives over gloo (local multi-process runs).
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=_COORDINATOR.value,
            num_processes=_NUM_PROCESSES.value,
            process_id=_PROCESS_ID.value,
        )
    elif auto:
        jax.distributed.initialize()


class _QuietLibraries(logging.Filter):
    """Drops INFO chatter of orbax/absl internals; our own INFO lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        noisy = "/orbax/" in record.pathname or "/jax/" in record.pathname
        return record.levelno >= logging.WARNING or not noisy


def main(argv):
    del argv
    logging.getLogger().setLevel(logging.INFO)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_QuietLibraries())
    from nemocascade import config as config_lib

    try:
        cfg = config_lib.from_config_dict(_CONFIG.value)
    except config_lib.ConfigError as e:
        sys.exit(f"config error: {e}")
    _maybe_initialize_distributed()
    from nemocascade.trainer import dispatch

    try:
        dispatch.run(cfg, _WORKDIR.value)
    except config_lib.ConfigError as e:
        sys.exit(f"config error: {e}")


if __name__ == "__main__":
    app.run(main)
