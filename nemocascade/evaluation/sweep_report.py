"""The sweep comparison: one row per run, its swept values and final metrics.

Reads each run's `<stage dir>/metrics.jsonl` (last value of every table key,
and of the stage's own held-out eval `eval/<domain>/<mode>/pass@1`) and
`eval_matrix.json` (the headline cell of every domain × mode), and writes
`DIR/sweep.md`, `DIR/sweep.json` and `DIR/sweep_curves.png` (the training
reward per step, one line per run). Table building is pure; only `write`
touches the disk.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from nemocascade.evaluation import report

# Final training metrics worth comparing, by stage kind (RL, SFT, RM); a column
# appears when some run has it.
TABLE_KEYS = (
    "reward_mean",
    "pass_rate",
    "entropy",
    "response_len_mean",
    "eval_loss",
    "pairwise_accuracy",
)
_HEADLINE_EVAL = ("/pass@1", "/gold")


def final_metrics(records: Sequence[dict]) -> dict[str, float]:
    """Last logged value of each table key and of each own-domain eval headline."""
    out: dict[str, float] = {}
    for r in records:
        for k, v in r.items():
            own_eval = k.startswith("eval/") and k.endswith(_HEADLINE_EVAL)
            if (k in TABLE_KEYS or own_eval) and isinstance(v, (int, float)):
                out[k] = float(v)
        if "step" in r:
            out["step"] = float(r["step"])
    return out


def matrix_headlines(matrix: dict[str, float]) -> dict[str, float]:
    """The eval matrix's headline cells (pass@1; chat: gold score), keyed `matrix/<d>/<m>`."""
    out = {}
    for d in report.DOMAINS:
        for m in report.MODES:
            v = matrix.get(report.headline_key(d, m))
            if v is not None:
                out[f"matrix/{d}/{m}"] = float(v)
    return out


def curve(records: Sequence[dict], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in records if key in r and "step" in r]


def plot_key(curves_by_key: dict[str, dict[str, list]]) -> str | None:
    """reward_mean for RL sweeps, else the training loss."""
    for key in ("reward_mean", "loss"):
        if any(curves_by_key.get(key, {}).values()):
            return key
    return None


def columns(rows: Sequence[dict]) -> list[str]:
    """Metric columns present in any row, in a fixed order (table keys, own eval, matrix)."""
    present = {k for r in rows for k in r.get("metrics", {})}
    own = sorted(k for k in present if k.startswith("eval/"))
    matrix = [
        f"matrix/{d}/{m}"
        for d in report.DOMAINS
        for m in report.MODES
        if f"matrix/{d}/{m}" in present
    ]
    return [k for k in TABLE_KEYS if k in present] + own + matrix


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def markdown(rows: Sequence[dict], swept: Sequence[str], metric_cols: Sequence[str]) -> list[str]:
    """Rows: {"name", "status", "values": {key: v}, "metrics": {key: v}} → table lines."""
    head = ["run", "status", *swept, "step", *metric_cols]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        m = r.get("metrics", {})
        step = m.get("step")
        cells = [r["name"], r["status"]]
        cells += [_cell(r["values"].get(k)) for k in swept]
        cells += [_cell(int(step)) if step is not None else "–"]
        cells += [_cell(m.get(k)) for k in metric_cols]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def read_run(stage_dir: str) -> tuple[dict[str, float], list[dict]]:
    """(final metrics incl. matrix headlines, all metric records) of one run's stage dir."""
    from nemocascade import metrics as metrics_lib

    records = metrics_lib.read(os.path.join(stage_dir, "metrics.jsonl"))
    final = final_metrics(records)
    path = os.path.join(stage_dir, "eval_matrix.json")
    if os.path.exists(path):
        with open(path) as f:
            final.update(matrix_headlines(json.load(f)["metrics"]))
    return final, records


def _plot(curves: dict[str, list[tuple[int, float]]], key: str, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in curves.items():
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, marker="o" if len(points) < 12 else None, label=name)
    ax.set(title=f"{key} per step", xlabel="step", ylabel=key)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(workdir: str, meta: dict, rows: list[dict], stage_dirs: dict[str, str]) -> str:
    """Fills each row's metrics from its stage dir; writes sweep.md/json/png; returns sweep.md."""
    os.makedirs(workdir, exist_ok=True)
    curves_by_key: dict[str, dict[str, list]] = {"reward_mean": {}, "loss": {}}
    for r in rows:
        final, records = read_run(stage_dirs[r["name"]])
        r["metrics"] = final
        for key in curves_by_key:
            curves_by_key[key][r["name"]] = curve(records, key)
    swept = list(meta["axes"])
    cols = columns(rows)
    lines = [f"# Sweep `{meta['config']}`", "", f"Workdir: `{os.path.abspath(workdir)}`", ""]
    if meta.get("overrides"):
        fixed = ", ".join(f"`{k}={v!r}`" for k, v in meta["overrides"].items())
        lines += [f"Fixed overrides: {fixed}", ""]
    lines += [
        "Final values: training metrics at the last logged step; `eval/…` is the stage's own "
        "held-out eval, `matrix/…` the eval matrix (pass@1; chat: gold score).",
        "",
    ]
    lines += markdown(rows, swept, cols)
    key = plot_key(curves_by_key)
    if key is not None:
        _plot(curves_by_key[key], key, os.path.join(workdir, "sweep_curves.png"))
        lines += ["", "![sweep_curves.png](sweep_curves.png)"]
    path = os.path.join(workdir, "sweep.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(workdir, "sweep.json"), "w") as f:
        json.dump({**meta, "runs": rows}, f, indent=1, default=repr)
    return path
