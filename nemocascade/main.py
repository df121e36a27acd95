"""Entry point: `python -m nemocascade.main --config=configs/<stage>.py[:ARG] --workdir=DIR`.

Parses flags, initializes multi-host JAX when launched that way, validates the
config (failing before any compile with a message naming the field) and hands
off to the stage named by `config.stage`. Faults of the environment (full
disk, unwritable workdir, damaged checkpoint) end in one line naming the
cause (`nemocascade.errors`); `--verbose` adds the traceback.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from nemocascade import errors

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


def _enable_compilation_cache(setting: str, workdir: str) -> None:
    """Persistent XLA cache: stages with the same model and shapes reuse compiled steps."""
    if not setting or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return  # off, or set by the environment
    import jax

    path = os.path.join(workdir, "jax_cache") if setting == "auto" else setting
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    logging.info("compilation cache: %s", path)


class _QuietLibraries(logging.Filter):
    """Drops INFO chatter of orbax/absl internals; our own INFO lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        noisy = "/orbax/" in record.pathname or "/jax/" in record.pathname
        return record.levelno >= logging.WARNING or not noisy


def _config_spec(argv: list[str]) -> str:
    spec = f"{_DEFAULT_CONFIG}:tiny"
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            spec = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            spec = argv[i + 1]
    return spec


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's parser, but a misspelled `--config.a.b=` stops with one line naming it.

    ml_collections raises a bare AttributeError/KeyError from inside the flag
    parser for an unknown field; here it is matched against the config file's
    fields and reported as `config error: unknown field config.a.b (did you
    mean ...?)`.
    """
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"{argv[0]}: {e}\nPass --helpfull to see help on flags.")
    except (AttributeError, KeyError, ValueError, TypeError) as e:
        from nemocascade import config as config_lib, overrides

        try:
            cd = overrides.load_config_file(_config_spec(argv))
            for arg in argv[1:]:
                if arg.startswith("--config."):
                    overrides.check_key(cd, arg.removeprefix("--config.").split("=", 1)[0])
        except config_lib.ConfigError as err:
            sys.exit(f"config error: {err}")
        sys.exit(f"config error: {type(e).__name__}: {e}")


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
    from nemocascade.trainer import preemption

    try:
        with errors.one_line("nemocascade.main"):
            _maybe_initialize_distributed()
            _enable_compilation_cache(cfg.train.compilation_cache, _WORKDIR.value)
            from nemocascade.trainer import dispatch

            dispatch.run(cfg, _WORKDIR.value)
    except config_lib.ConfigError as e:
        sys.exit(f"config error: {e}")
    except preemption.Preempted as e:
        logging.warning("%s", e)
        sys.exit(preemption.EXIT_CODE)


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
