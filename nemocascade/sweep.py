"""Grid sweeps over any config field: `python -m nemocascade.sweep`.

    python -m nemocascade.sweep --config=configs/stage2_medium.py:tiny --workdir=/tmp/sw \
        --sweep='optim.lr=1e-6,3e-6;rl.group_size=4,8' [--overrides='train.steps=10'] \
        [--launcher=local|tpu_pod|slurm] [--dry_run] [--report_only]

The grid is the product of the axes (';' separates fields, ',' values; each
value is a Python literal, else a string). Every run's config is built and
validated with `nemocascade.config` before the first run starts, so a
misspelled field or a bad value stops the sweep at once, in one line that
names it. Each run is exactly the command a user would type,
`python -m nemocascade.main --config=... --workdir=DIR/<run> --config.a.b=v`,
so a run can be repeated or resumed by hand. `local` runs them one after
another in fresh processes (a fresh JAX runtime each, sharing a persistent
compilation cache in DIR/jax_cache); finished runs (DONE) are skipped and a
failed run is recorded while the sweep goes on. `tpu_pod` and `slurm` print
the launcher commands (launch/tpu_pod.sh, launch/gpu_slurm.sbatch) instead:
pipe them to bash, then collect with `--report_only`. The comparison goes to
DIR/sweep.md, sweep.json and sweep_curves.png.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from absl import app, flags

from nemocascade import config as config_lib, errors, overrides as overrides_lib

_CONFIG = flags.DEFINE_string("config", None, "Config file[:arg], as for nemocascade.main.")
_SWEEP = flags.DEFINE_string("sweep", None, "'section.field=v1,v2;section.field=v1,v2'.")
_OVERRIDES = flags.DEFINE_string("overrides", "", "Fixed 'section.field=v;...' for every run.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory; run i writes DIR/<run name>.")
_LAUNCHER = flags.DEFINE_enum("launcher", "local", ["local", "tpu_pod", "slurm"], "Where to run.")
_LAUNCHER_ARGS = flags.DEFINE_string(
    "launcher_args",
    None,
    'Options for the launcher script (tpu_pod default: --tpu="$TPU" --zone="$ZONE"; '
    "slurm: sbatch options such as --nodes=4).",
)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the run commands; run nothing.")
_REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Only (re)write the comparison table.")
_JAX_CACHE = flags.DEFINE_bool(
    "jax_cache", True, "Local runs share a persistent compilation cache in DIR/jax_cache."
)

_LAUNCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch")
_SCRIPTS = {"tpu_pod": "tpu_pod.sh", "slurm": "gpu_slurm.sbatch"}


@dataclasses.dataclass(frozen=True)
class Run:
    """One point of the grid."""

    name: str
    values: dict[str, Any]  # the swept fields only
    argv: tuple[str, ...]  # `-m nemocascade.main ...`, without the interpreter
    stage_dirs: tuple[str, ...]  # where it writes; the last one holds the results


def parse_axes(text: str) -> list[tuple[str, list[Any]]]:
    axes = overrides_lib.parse(text)
    if not axes:
        raise config_lib.ConfigError("--sweep is empty; expected 'section.field=v1,v2;...'")
    return axes


def expand(axes: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """Grid points in order, the last axis varying fastest."""
    keys = [k for k, _ in axes]
    grid = itertools.product(*(values for _, values in axes))
    return [dict(zip(keys, combo, strict=True)) for combo in grid]


def _name_part(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "+".join(_name_part(v) for v in value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", overrides_lib.format_value(value)).strip("_")


def run_name(values: dict[str, Any]) -> str:
    """{'optim.lr': 1e-6, 'rl.group_size': 4} → 'lr-1e-06__group_size-4'.

    Field names alone keep directory names short; a name shared by two swept
    fields falls back to the full dotted path.
    """
    leaves = [k.rsplit(".", 1)[-1] for k in values]
    parts = []
    for key, leaf in zip(values, leaves, strict=True):
        label = leaf if leaves.count(leaf) == 1 else key
        parts.append(f"{label}-{_name_part(values[key])}")
    return "__".join(parts) or "run"


def stage_dirs(cfg: config_lib.Config, run_dir: str) -> tuple[str, ...]:
    """The stage directories a run writes (a cascade writes one per stage)."""
    if cfg.stage != "cascade":
        return (os.path.join(run_dir, cfg.stage),)
    return tuple(os.path.join(run_dir, n) for n in cfg.cascade.chain)


def plan(
    config_spec: str,
    base: Any,
    axes: Sequence[tuple[str, Sequence[Any]]],
    fixed: dict[str, Any],
    workdir: str,
) -> list[Run]:
    """Validates every grid point (raising ConfigError by field name) and names its run."""
    both = sorted(set(fixed) & {k for k, _ in axes})
    if both:
        raise config_lib.ConfigError(f"config.{both[0]} is in both --overrides and --sweep")
    runs, seen = [], {}
    for values in expand(axes):
        cfg = overrides_lib.build(base, {**fixed, **values})
        name = run_name(values)
        if name in seen:
            raise config_lib.ConfigError(f"runs {seen[name]} and {values} share the name {name!r}")
        seen[name] = values
        run_dir = os.path.join(workdir, name)
        argv = (
            "-m",
            "nemocascade.main",
            f"--config={config_spec}",
            f"--workdir={run_dir}",
            *overrides_lib.to_flags({**fixed, **values}),
        )
        runs.append(Run(name, dict(values), argv, stage_dirs(cfg, run_dir)))
    return runs


def is_finished(run: Run) -> bool:
    return all(os.path.exists(os.path.join(d, "DONE")) for d in run.stage_dirs)


def launcher_command(launcher: str, run: Run, launcher_args: str | None) -> str:
    """The shell line that starts `run` through launch/ (commands are printed, not run)."""
    main = "python " + shlex.join(run.argv)
    script = os.path.relpath(os.path.join(_LAUNCH_DIR, _SCRIPTS[launcher]))
    if launcher == "tpu_pod":
        opts = launcher_args if launcher_args is not None else '--tpu="$TPU" --zone="$ZONE"'
        return f"{script} {opts} -- {main}"
    run_dir = os.path.dirname(run.stage_dirs[0])
    job = shlex.join([f"--job-name={run.name}", f"--output={run_dir}/slurm-%j.out"])
    opts = f" {launcher_args}" if launcher_args else ""
    return f"mkdir -p {shlex.quote(run_dir)} && sbatch {job}{opts} {script} {main}"


def _subprocess_runner(argv: Sequence[str], log_path: str, env: dict[str, str]) -> int:
    with open(log_path, "w") as log:
        return subprocess.call(
            [sys.executable, *argv], stdout=log, stderr=subprocess.STDOUT, env=env
        )


def run_local(
    runs: Sequence[Run],
    workdir: str,
    *,
    env: dict[str, str] | None = None,
    runner: Callable[[Sequence[str], str, dict[str, str]], int] = _subprocess_runner,
) -> list[dict[str, Any]]:
    """Runs one after another; returns a status record per run (skipped / done / failed)."""
    env = dict(os.environ if env is None else env)
    records = []
    for i, run in enumerate(runs, 1):
        log_path = os.path.join(workdir, run.name, "sweep.log")
        record: dict[str, Any] = {"name": run.name, "values": run.values, "log": log_path}
        if is_finished(run):
            logging.info("[sweep] %d/%d %s: finished earlier; skipped", i, len(runs), run.name)
            records.append({**record, "status": "skipped"})
            continue
        logging.info("[sweep] %d/%d %s: running (log %s)", i, len(runs), run.name, log_path)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        t0 = time.perf_counter()
        code = runner(run.argv, log_path, env)
        seconds = round(time.perf_counter() - t0, 1)
        status = "done" if code == 0 else "failed"
        logging.info("[sweep] %s: %s (exit %d) in %.0f s", run.name, status, code, seconds)
        records.append({**record, "status": status, "returncode": code, "seconds": seconds})
    return records


def _pending(runs: Sequence[Run], label: str) -> list[dict[str, Any]]:
    return [
        {"name": r.name, "values": r.values, "status": "done" if is_finished(r) else label}
        for r in runs
    ]


def main(argv):
    del argv
    logging.getLogger().setLevel(logging.INFO)
    for name, flag in (("config", _CONFIG), ("sweep", _SWEEP), ("workdir", _WORKDIR)):
        if not flag.value:
            sys.exit(f"sweep error: --{name} is required")
    workdir = _WORKDIR.value
    try:
        base = overrides_lib.load_config_file(_CONFIG.value)
        axes = parse_axes(_SWEEP.value)
        fixed = overrides_lib.parse_single(_OVERRIDES.value)
        runs = plan(_CONFIG.value, base, axes, fixed, workdir)
    except config_lib.ConfigError as e:
        sys.exit(f"sweep error: {e}")
    logging.info("[sweep] %d runs, all configs valid", len(runs))

    if _REPORT_ONLY.value:
        records = _pending(runs, "pending")
    elif _LAUNCHER.value != "local":
        for run in runs:
            line = launcher_command(_LAUNCHER.value, run, _LAUNCHER_ARGS.value)
            print(f"# {run.name}: finished; skipped" if is_finished(run) else line)
        return
    elif _DRY_RUN.value:
        for run in runs:
            done = is_finished(run)
            print(("# finished: " if done else "") + "python " + shlex.join(run.argv))
        return
    else:
        env = dict(os.environ)
        if _JAX_CACHE.value:
            env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(workdir, "jax_cache"))
            env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        records = run_local(runs, workdir, env=env)

    from nemocascade.evaluation import sweep_report

    meta = {"config": _CONFIG.value, "axes": dict(axes), "overrides": fixed}
    path = sweep_report.write(workdir, meta, records, {r.name: r.stage_dirs[-1] for r in runs})
    print(f"wrote {path}")
    failed = [r["name"] for r in records if r["status"] == "failed"]
    if failed:
        names = ", ".join(failed)
        sys.exit(f"sweep: {len(failed)} run(s) failed: {names} (logs: DIR/<run>/sweep.log)")


def _main(argv):
    with errors.one_line("sweep"):  # a full disk or unwritable --workdir: one line
        main(argv)


if __name__ == "__main__":
    app.run(_main)
