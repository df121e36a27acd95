"""The cascade report over several seeds: mean ± sd per cell and per stage delta.

Reads `W/<stage>/eval_matrix.json` of every workdir W (one cascade run per
seed) and writes `OUT/report.md`, `OUT/summary.json` and `OUT/eval_heatmap.png`
(the means). Regenerate with
`python -m nemocascade.report --workdirs=A,B,C --out=OUT`.

The sd is the sample sd over seeds (ddof 1). A stage missing from some
workdirs is aggregated over those that have it; every row says its n. A
stage's delta is, per seed, its value minus the previous aggregated stage's
value in the same workdir, then mean ± sd over the seeds that have both. The
binomial noise of a cell is sqrt(p (1 - p) / n_prompts) at the mean p, with
n_prompts the stage's `eval.num_per_domain` from its `config.json` (the
resolved config each stage writes), else `num_prompts`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence

from nemocascade import stage_registry
from nemocascade.evaluation import report

CONFIG_FILE = "config.json"  # the resolved config of a stage (trainer/stage_setup.py)


def mean_sd(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample sd with ddof 1 or NaN below 2 values, n)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    return statistics.fmean(values), statistics.stdev(values) if n > 1 else math.nan, n


def _stage_config(workdirs: Sequence[str], stage: str) -> dict | None:
    for w in workdirs:
        path = os.path.join(w, stage, CONFIG_FILE)
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    return None


def num_prompts(workdirs: Sequence[str], stage: str, default: int) -> tuple[int, str]:
    """(prompts per cell, where the number came from) for `stage`'s eval matrix."""
    cfg = _stage_config(workdirs, stage)
    n = (cfg or {}).get("eval", {}).get("num_per_domain")
    if n:
        return int(n), f"its {CONFIG_FILE} (`eval.num_per_domain`)"
    return default, f"--num_prompts={default} (no {CONFIG_FILE} of the stage records it)"


def own_domains(workdirs: Sequence[str], stage: str) -> tuple[str, ...]:
    """The domains an RL stage trains (`rl.domains` of its config.json); () otherwise."""
    if stage not in stage_registry.STAGES or stage_registry.STAGES[stage].kind != "rl":
        return ()
    cfg = _stage_config(workdirs, stage)
    return tuple((cfg or {}).get("rl", {}).get("domains", ()))


def aggregate(
    tables: Sequence[Mapping[str, Mapping[str, float]]], done: Sequence[str], keys: Sequence[str]
) -> dict[str, dict]:
    """{stage: {"n", "cells": {key: {mean, sd, n}}, "delta": {key: {mean, sd, n}}}}."""
    out: dict[str, dict] = {}
    prev = None
    for s in done:
        have = [t for t in tables if s in t]
        cells, delta = {}, {}
        for k in keys:
            vals = [t[s][k] for t in have if k in t[s]]
            if vals:
                cells[k] = dict(zip(("mean", "sd", "n"), mean_sd(vals), strict=True))
            if prev is not None:
                d = [t[s][k] - t[prev][k] for t in have if prev in t and k in t[s] and k in t[prev]]
                if d:
                    delta[k] = dict(zip(("mean", "sd", "n"), mean_sd(d), strict=True))
        out[s] = {"n": len(have), "cells": cells, "delta": delta}
        prev = s
    return out


def forgetting(agg: Mapping[str, dict], tolerance: float) -> list[str]:
    """The forgetting rule on the mean table: cells below their best earlier mean."""
    means = {s: {k: c["mean"] for k, c in row["cells"].items()} for s, row in agg.items()}
    return [
        f"{k}: mean {100 * is_:.1f} after {s}, {100 * (was - is_):.1f} points below "
        f"its best earlier mean {100 * was:.1f} (after {best_stage})"
        for s, k, was, best_stage, is_ in report.drops_from_best(means, tolerance)
    ]


def _pm(c: Mapping[str, float] | None, signed: bool = False) -> str:
    if c is None:
        return "–"
    mean = f"{100 * c['mean']:+.1f}" if signed else f"{100 * c['mean']:.1f}"
    return mean + ("" if math.isnan(c["sd"]) else f" ± {100 * c['sd']:.1f}")


def _grid(agg, keys, labels, field: str) -> list[str]:
    lines = ["| stage | n | " + " | ".join(labels) + " |", "|---" * (len(keys) + 2) + "|"]
    for s, row in agg.items():
        if field == "delta" and not row["delta"]:
            continue
        n = row["n"] if field == "cells" else max(c["n"] for c in row["delta"].values())
        cells = [_pm(row[field].get(k), signed=field == "delta") for k in keys]
        lines.append(f"| {s} | {n} | " + " | ".join(cells) + " |")
    return lines


def _noise(agg, noise_n: Mapping[str, int], keys, labels) -> list[str]:
    lines = ["| stage | prompts | " + " | ".join(labels) + " |", "|---" * (len(keys) + 2) + "|"]
    for s, row in agg.items():
        n = noise_n[s]
        cells = []
        for k in keys:
            p = row["cells"].get(k, {}).get("mean")
            cells.append("–" if p is None else f"{100 * math.sqrt(p * (1 - p) / n):.1f}")
        lines.append(f"| {s} | {n} | " + " | ".join(cells) + " |")
    return lines


def _gains(agg, workdirs) -> tuple[list[str], dict[str, dict]]:
    lines, out = ["| stage | trains | cell | gain (points) | n |", "|---|---|---|---|---|"], {}
    for s, row in agg.items():
        for d in own_domains(workdirs, s):
            for m in report.MODES:
                k = report.headline_key(d, m)
                c = row["delta"].get(k)
                if c is None:
                    continue
                out.setdefault(s, {})[k] = c
                role = stage_registry.STAGES[s].role
                lines.append(f"| {s} | {role} | {d}/{m} | {_pm(c, True)} | {c['n']} |")
    return lines, out


def _json_safe(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    return x


def write(
    workdirs: Sequence[str],
    stages: Sequence[str],
    out: str,
    tolerance: float = 0.03,
    default_num_prompts: int = 64,
) -> str:
    """Writes OUT/report.md, OUT/summary.json and OUT/eval_heatmap.png; returns report.md's path."""
    tables = [report.collect(w, stages) for w in workdirs]
    done = [s for s in stages if any(s in t for t in tables)]
    heads = [report.headline_key(d, m) for d in report.DOMAINS for m in report.MODES]
    bench = report.benchmark_keys(
        {f"{i}/{s}": m for i, t in enumerate(tables) for s, m in t.items()}
    )
    agg = aggregate(tables, done, heads + bench)
    prompts = {s: num_prompts(workdirs, s, default_num_prompts) for s in done}
    labels = [f"{d}/{m[:5]}" for d in report.DOMAINS for m in report.MODES]
    os.makedirs(out, exist_ok=True)

    lines = ["# Cascade report over seeds", "", f"{len(workdirs)} workdirs (one per seed):", ""]
    lines += [f"- `{os.path.abspath(w)}`" for w in workdirs]
    lines += [
        "",
        "Held-out pass@1 (greedy) per domain × mode in percent, chat the gold-rubric score: "
        "mean ± sd over seeds (sample sd, ddof 1); n = seeds that have the stage.",
        "",
    ]
    lines += _grid(agg, heads, labels, "cells") if done else ["(no stage has finished yet)"]
    lines += [
        "",
        "Change from the previous stage, per seed, then mean ± sd (n = seeds with both stages):",
        "",
    ]
    lines += _grid(agg, heads, labels, "delta")
    if bench:
        lines += ["", "Benchmark suites (`eval.suites`), pass@1 in percent, mean ± sd:", ""]
        lines += _grid(agg, bench, [k.removesuffix("/pass@1") for k in bench], "cells")
    by_source: dict[str, list[str]] = {}
    for s, (_, src) in prompts.items():
        by_source.setdefault(src, []).append(s)
    sources = "; ".join(f"{', '.join(ss)} from {src}" for src, ss in by_source.items())
    lines += [
        "",
        "## Binomial noise of a cell",
        "",
        "sqrt(p (1 - p) / prompts) in points at p = the mean: the sd of one seed's cell from "
        "the draw of prompts alone (for chat's gold score, an upper bound). Prompts per cell "
        f"of {sources}.",
        "",
    ]
    lines += _noise(agg, {s: n for s, (n, _) in prompts.items()}, heads, labels)
    gain_lines, gains = _gains(agg, workdirs)
    lines += ["", "## Own-domain gain of each RL stage (mean ± sd of the per-seed change)", ""]
    lines += gain_lines if gains else ["(no RL stage with a recorded `rl.domains`)"]
    flags = forgetting(agg, tolerance)
    lines += ["", f"## Forgetting check on the means (tolerance {100 * tolerance:.0f} points)", ""]
    lines += [f"- **{f}**" for f in flags] if flags else ["No mean cell dropped beyond tolerance."]
    if done:
        means = {s: {k: c["mean"] for k, c in agg[s]["cells"].items()} for s in done}
        report.heatmap(means, done, os.path.join(out, "eval_heatmap.png"))
        lines += ["", "![eval_heatmap.png](eval_heatmap.png) (the means)"]
    lines += ["", "## Per-seed tables", ""]
    for w, t in zip(workdirs, tables, strict=True):
        mine = [s for s in done if s in t]
        lines += [f"### `{os.path.abspath(w)}`", ""]
        lines += (report._table(t, mine) if mine else ["(no stage has finished)"]) + [""]

    summary = {
        "workdirs": [os.path.abspath(w) for w in workdirs],
        "tolerance": tolerance,
        "stages": agg,
        "num_prompts": {s: n for s, (n, _) in prompts.items()},
        "own_domain_gain": gains,
        "forgetting": flags,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(_json_safe(summary), f, indent=1)
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
