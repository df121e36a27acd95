"""The cascade orchestrator: an ordered chain of stages, each its own RL problem.

Stage k+1 initializes from stage k's exported params (the reward model from
SFT; RLHF reads the RM it needs), every stage writes to `DIR/<stage>/`, and
the report is refreshed after each stage. Rerunning the same command skips
finished stages (their `DONE` marker) and resumes an interrupted one from its
own checkpoints. After every stage the evaluation matrix is compared with the
best earlier value of each cell (the forgetting guard).
"""

from __future__ import annotations

import ast
import importlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from nemocascade import checkpointing, config as config_lib
from nemocascade.evaluation import report, suites as suites_lib
from nemocascade.trainer import dispatch

ORDERS = {
    "c1": ("sft", "rm", "rlhf", "stage1_short", "stage2_medium", "stage3_long"),
    "c2": ("sft", "stage1_short", "stage2_medium", "mopd", "rm", "rlhf", "stage3_long"),
}
# On-policy stages, which can run the in-stage forgetting guard (trainer/onpolicy/guard.py).
_ON_POLICY = {"rlhf", "stage1_short", "stage2_medium", "stage3_long", "mopd"}
# Stages that do not continue the policy chain: they start from SFT and hand
# nothing on (the RM is read by RLHF through `rl.rm_from`).
_SIDE_STAGES = {"rm"}


def parse_overrides(text: str) -> dict[str, dict[str, Any]]:
    """'stage.section.field=value;...' → {stage: {"section.field": value}}."""
    out: dict[str, dict[str, Any]] = {}
    for item in filter(None, (x.strip() for x in text.split(";"))):
        key, sep, raw = item.partition("=")
        stage, dot, path = key.strip().partition(".")
        if not sep or not dot:
            raise config_lib.ConfigError(
                f"config.cascade.set: expected 'stage.section.field=value', got {item!r}"
            )
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()  # a bare string
        out.setdefault(stage, {})[path] = value
    return out


def merged_overrides(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`cascade.defaults` (the size's per-stage settings), then `cascade.set` on top.

    With `cascade.stop_on_forgetting` every on-policy stage also gets the
    in-stage guard at `cascade.forgetting_tolerance` (before `cascade.set`).
    """
    out = parse_overrides(str(spec.get("defaults", "")))
    if spec.get("stop_on_forgetting", False):
        tolerance = float(spec.get("forgetting_tolerance", 0.03))
        for stage in _ON_POLICY:
            out.setdefault(stage, {}).update(
                {"eval.guard_tolerance": tolerance, "eval.guard_stop": True}
            )
    for stage, fields in parse_overrides(str(spec.get("set", ""))).items():
        out.setdefault(stage, {}).update(fields)
    return out


def select_teachers(
    domains: Sequence[str], matrices: Mapping[str, Mapping[str, float]]
) -> dict[str, str]:
    """{domain: stage} whose eval matrix has the best thinking-mode headline score.

    `matrices` is {stage: eval-matrix metrics} in chain order; the score is
    the mean thinking-mode pass@1 of the stage's benchmark suites of that
    domain (`eval.suites`: HumanEval for code, GSM8K for math, ...) when it
    has any, else `<domain>/thinking/pass@1` (`chat/thinking/gold` for chat);
    ties go to the later stage (it has seen more of the chain). This is the
    paper's "strongest validation checkpoint per benchmark category" (C2 §4.4)
    over the chain.
    """
    out = {}
    for domain in domains:
        key = report.headline_key(domain, "thinking")
        best = None
        for stage, metrics in matrices.items():
            keys = suites_lib.domain_keys(metrics, domain, "thinking") or [key]
            if keys[0] not in metrics:
                continue
            score = sum(metrics[k] for k in keys) / len(keys)
            if best is None or score >= best[1]:
                best = (stage, score)
        if best is None:
            raise config_lib.ConfigError(
                f"config.rl.teachers: no earlier stage of the chain ({list(matrices)}) has "
                f"{key!r} in its eval matrix; set it with "
                "--config.cascade.set='mopd.rl.teachers=domain=DIR,...'"
            )
        out[domain] = best[0]
    return out


def _teachers_from_chain(domains: Sequence[str], workdir: str, earlier: Sequence[str]) -> str:
    """`rl.teachers` for MOPD from the finished earlier policy stages in `workdir`."""
    done = [s for s in earlier if checkpointing.is_done(os.path.join(workdir, s))]
    chosen = select_teachers(domains, report.collect(workdir, done))
    logging.info("[cascade] MOPD teachers: %s", chosen)
    return ",".join(f"{d}={os.path.join(os.path.abspath(workdir), s)}" for d, s in chosen.items())


def stage_config(
    name: str,
    size: str,
    overrides: dict[str, Any],
    init_from: str,
    workdir: str,
    earlier: Sequence[str] = (),
) -> config_lib.Config:
    """Loads `configs/<name>.py:<size>`, applies the cascade's overrides and hand-off.

    MOPD without explicit `rl.teachers` gets them from `earlier` (the policy
    stages before it in the chain) by `select_teachers`.
    """
    module = importlib.import_module(f"configs.{name}")
    cd = module.get_config(size)
    cd.init.init_from = init_from
    if name == "rlhf":
        cd.rl.rm_from = os.path.join(workdir, "rm")
    for dotted, value in overrides.items():
        node = cd
        *path, leaf = dotted.split(".")
        try:
            for part in path:
                node = node[part]
            known = leaf in node
        except (KeyError, AttributeError, TypeError):
            known = False
        if not known:
            raise config_lib.ConfigError(f"config.cascade.set: {name} has no field {dotted!r}")
        node[leaf] = type(node[leaf])(value) if isinstance(node[leaf], float) else value
    cfg = config_lib.from_config_dict(cd)
    if name == "mopd" and not cfg.rl.teachers:
        cd.rl.teachers = _teachers_from_chain(cfg.rl.domains, workdir, earlier)
        cfg = config_lib.from_config_dict(cd)
    return cfg


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Runs the chain named by `cfg.extra['cascade']`."""
    spec = dict(cfg.extra.get("cascade", {}))
    order = spec.get("order", "c1")
    if order not in ORDERS:
        raise config_lib.ConfigError(
            f"config.cascade.order={order!r}; choose from {sorted(ORDERS)}"
        )
    stages = tuple(filter(None, str(spec.get("stages", "")).split(","))) or ORDERS[order]
    size = spec.get("size", "tiny")
    overrides = merged_overrides(spec)
    tolerance = float(spec.get("forgetting_tolerance", 0.03))
    unknown = [
        s for s in list(stages) + list(overrides) if s not in config_lib.STAGES or s == "cascade"
    ]
    if unknown:
        raise config_lib.ConfigError(f"config.cascade: unknown stage names {unknown}")
    os.makedirs(workdir, exist_ok=True)
    policy_from, sft_dir = "", os.path.join(workdir, "sft")
    policy_stages: list[str] = []
    for name in stages:
        stage_dir = os.path.join(workdir, name)
        init = sft_dir if name in _SIDE_STAGES else policy_from
        stage_cfg = stage_config(
            name, size, overrides.get(name, {}), init, workdir, earlier=tuple(policy_stages)
        )
        if checkpointing.is_done(stage_dir):
            logging.info("[cascade] %s finished earlier; skipping", name)
        else:
            logging.info("[cascade] ===== stage %s (init from %s) =====", name, init or "scratch")
            dispatch.run(stage_cfg, workdir)
        if name not in _SIDE_STAGES:
            policy_from = stage_dir
            policy_stages.append(name)
        flags = report.forgetting(workdir, stages, tolerance)
        for f in flags:
            logging.warning("[cascade] FORGETTING: %s", f)
        report.write(workdir, stages, tolerance)
    summary = report.collect(workdir, stages)
    with open(os.path.join(workdir, "cascade_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
