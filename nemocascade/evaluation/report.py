"""The cascade report: stage-by-stage evaluation table, heatmap and training curves.

Reads `DIR/<stage>/eval_matrix.json` and `DIR/<stage>/metrics.jsonl` and
writes `DIR/report.md`, `DIR/eval_heatmap.png` and `DIR/curves.png`.
Regenerate with `python -m nemocascade.report --workdir=DIR`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from nemocascade import metrics as metrics_lib, stage_registry
from nemocascade.rewards import sandbox
from nemocascade.tasks import base as tasks_base

DOMAINS = tasks_base.CASCADE_ORDER  # report columns: the domains in the order C1 trains them
MODES = tasks_base.MODES
# The finished cascade's summary: {stage: eval metrics}, stages in chain order.
SUMMARY_FILE = "cascade_summary.json"


def headline_key(domain: str, mode: str) -> str:
    return f"{domain}/{mode}/gold" if domain == "chat" else f"{domain}/{mode}/pass@1"


def collect(workdir: str, stages: Sequence[str]) -> dict[str, dict[str, float]]:
    """{stage: metrics} for every stage that has written its eval matrix."""
    out = {}
    for stage in stages:
        path = os.path.join(workdir, stage, "eval_matrix.json")
        if os.path.exists(path):
            with open(path) as f:
                out[stage] = json.load(f)["metrics"]
    return out


def drops(
    reference: Mapping[str, float], now: Mapping[str, float], tolerance: float
) -> dict[str, tuple[float, float]]:
    """The forgetting rule: {cell: (reference, now)} for each cell more than
    `tolerance` below its reference value. The report's reference is a cell's
    best earlier stage; the in-stage guard's is the stage's start."""
    return {
        k: (reference[k], now[k])
        for k in reference
        if k in now and now[k] < reference[k] - tolerance
    }


def drops_from_best(
    rows: Mapping[str, Mapping[str, float]], tolerance: float
) -> list[tuple[str, str, float, str, float]]:
    """(stage, cell, best earlier value, its stage, value now) for every cell of
    `rows` (stage → cell values, in chain order) more than `tolerance` below its
    best value at an earlier stage."""
    out = []
    best: dict[str, tuple[float, str]] = {}  # cell -> (best value so far, its stage)
    for s, now in rows.items():
        for k, (was, is_) in drops({k: v for k, (v, _) in best.items()}, now, tolerance).items():
            out.append((s, k, was, best[k][1], is_))
        for k, v in now.items():
            if k not in best or v > best[k][0]:
                best[k] = (v, s)
    return out


def forgetting(workdir: str, stages: Sequence[str], tolerance: float) -> list[str]:
    """Cells that fell more than `tolerance` below their best earlier value."""
    table = collect(workdir, stages)
    keys = [headline_key(d, m) for d in DOMAINS for m in MODES] + benchmark_keys(table)
    rows = {s: {k: table[s][k] for k in keys if k in table[s]} for s in stages if s in table}
    return [
        f"{k} dropped from {was:.3f} (after {best_stage}) to {is_:.3f} "
        f"after {s} (tolerance {tolerance:.3f})"
        for s, k, was, best_stage, is_ in drops_from_best(rows, tolerance)
    ]


def benchmark_keys(table: dict[str, dict[str, float]]) -> list[str]:
    """`<suite>/<mode>/pass@1` keys of benchmark suites (`eval.suites`), sorted."""
    keys = {k for metrics in table.values() for k in metrics}
    return sorted(k for k in keys if k.endswith("/pass@1") and k.split("/")[0] not in DOMAINS)


def _benchmarks(table: dict[str, dict[str, float]], done: list[str]) -> list[str]:
    keys = benchmark_keys(table)
    lines = ["| stage | " + " | ".join(k.removesuffix("/pass@1") for k in keys) + " |"]
    lines.append("|---" * (len(keys) + 1) + "|")
    for s in done:
        cells = [f"{100 * table[s][k]:.1f}" if k in table[s] else "–" for k in keys]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def _table(table: dict[str, dict[str, float]], done: list[str]) -> list[str]:
    cols = [(d, m) for d in DOMAINS for m in MODES]
    head = "| stage | trains | " + " | ".join(f"{d}/{m[:5]}" for d, m in cols) + " |"
    lines = [head, "|---" * (len(cols) + 2) + "|"]
    prev = None
    for s in done:
        cells = []
        for d, m in cols:
            v = table[s].get(headline_key(d, m))
            if v is None:
                cells.append("–")
                continue
            cell = f"{100 * v:.1f}"
            p = None if prev is None else table[prev].get(headline_key(d, m))
            if p is not None:
                cell += f" ({100 * (v - p):+.1f})"
            cells.append(cell)
        role = stage_registry.STAGES[s].role if s in stage_registry.STAGES else ""
        lines.append(f"| {s} | {role} | " + " | ".join(cells) + " |")
        prev = s
    return lines


def _lengths(table, done) -> list[str]:
    lines = ["| stage | " + " | ".join(f"{d}/{m[:5]}" for d in DOMAINS for m in MODES) + " |"]
    lines.append("|---" * (len(DOMAINS) * len(MODES) + 1) + "|")
    for s in done:
        cells = [
            f"{table[s].get(f'{d}/{m}/mean_len', float('nan')):.0f}" for d in DOMAINS for m in MODES
        ]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def heatmap(table: dict[str, dict[str, float]], done: list[str], path: str) -> None:
    """Writes the stage × (domain, mode) headline grid of `table` as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cols = [(d, m) for d in DOMAINS for m in MODES]
    grid = np.array(
        [[table[s].get(headline_key(d, m), np.nan) for d, m in cols] for s in done], float
    )
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2, 0.5 * len(done) + 1.5))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), [f"{d}\n{m}" for d, m in cols], fontsize=8)
    ax.set_yticks(range(len(done)), done)
    for i in range(len(done)):
        for j in range(len(cols)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{100 * grid[i, j]:.0f}", ha="center", va="center", color="w")
    fig.colorbar(im, ax=ax, label="pass@1 (chat: gold score)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plots(workdir: str, table, done) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heatmap(table, done, os.path.join(workdir, "eval_heatmap.png"))
    written = ["eval_heatmap.png"]
    curves = {s: metrics_lib.read(os.path.join(workdir, s, "metrics.jsonl")) for s in done}
    curves = {s: [r for r in rec if "reward_mean" in r] for s, rec in curves.items()}
    curves = {s: rec for s, rec in curves.items() if rec}
    if curves:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
        for s, rec in curves.items():
            steps = [r["step"] for r in rec]
            axes[0].plot(steps, [r["reward_mean"] for r in rec], label=s)
            axes[1].plot(steps, [r["response_len_mean"] for r in rec], label=s)
        axes[0].set(title="reward (mean over rollouts)", xlabel="step")
        axes[1].set(title="response length (tokens)", xlabel="step")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(workdir, "curves.png"), dpi=100)
        plt.close(fig)
        written.append("curves.png")
    return written


RUN_FILE = "run.json"  # written by each stage at its start (trainer/stage_setup.py)


def _runs(workdir: str, stages: Sequence[str]) -> list[str]:
    """How each stage ran: commit, devices, mesh, versions, command line (its run.json)."""
    rows = []
    for s in stages:
        path = os.path.join(workdir, s, RUN_FILE)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            r = json.load(f)
        mesh = "×".join(f"{k} {v}" for k, v in r.get("mesh", {}).items())
        devices = f"{r.get('num_devices')} × {r.get('device_kind')} ({r.get('platform')})"
        versions = ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items() if v)
        rows.append(
            f"| {s} | `{(r.get('git_commit') or '-')[:12]}` | {devices}, "
            f"{r.get('num_processes')} process(es) | {mesh} | {versions} |"
        )
    if not rows:
        return []
    head = ["", "## Run records", "", "| stage | commit | devices | mesh | versions |"]
    return head + ["|---|---|---|---|---|"] + rows


def write(workdir: str, stages: Sequence[str], tolerance: float = 0.03) -> str:
    """Writes report.md (+ PNGs); returns its path."""
    table = collect(workdir, stages)
    done = [s for s in stages if s in table]
    lines = ["# Cascade report", "", f"Workdir: `{os.path.abspath(workdir)}`", ""]
    lines += [
        "Held-out pass@1 (greedy) per domain × mode, in percent; chat is the gold-rubric "
        "score. Parentheses: change from the previous stage.",
        "",
    ]
    lines += _table(table, done) if done else ["(no stage has finished yet)"]
    lines += ["", "Mean response length (tokens):", ""]
    lines += _lengths(table, done) if done else []
    if done and benchmark_keys(table):
        lines += ["", "Benchmark suites (`eval.suites`), pass@1 in percent:", ""]
        lines += _benchmarks(table, done)
    note = sandbox.WEAK_BACKEND_NOTE
    weak = [s for s in stages if os.path.exists(os.path.join(workdir, s, note))]
    if weak:
        lines += ["", f"**WARNING: {', '.join(weak)} ran model-written code on the weaker "]
        lines[-1] += "rlimit sandbox backend (no namespaces; docs/security.md).**"
    lines += _runs(workdir, stages)
    flags = forgetting(workdir, stages, tolerance)
    lines += ["", f"## Forgetting guard (tolerance {100 * tolerance:.0f} points)", ""]
    lines += [f"- **{f}**" for f in flags] if flags else ["No cell dropped beyond tolerance."]
    if done:
        lines += [""] + [f"![{p}]({p})" for p in _plots(workdir, table, done)]
    path = os.path.join(workdir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
