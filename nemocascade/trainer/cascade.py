"""The cascade orchestrator: an ordered chain of stages, each its own RL problem.

Stage k+1 initializes from stage k's exported params (the reward model from
SFT; RLHF reads the RM it needs), every stage writes to `DIR/<stage>/`, and
the report is refreshed after each stage. Rerunning the same command skips
finished stages (their `DONE` marker) and resumes an interrupted one from its
own checkpoints. After every stage the evaluation matrix is compared with the
best earlier value of each cell (the forgetting guard).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from nemocascade import (
    checkpointing,
    config as config_lib,
    overrides as overrides_lib,
    stage_registry,
)
from nemocascade.evaluation import report, suites as suites_lib
from nemocascade.trainer import dispatch


def merged_overrides(spec: config_lib.CascadeConfig) -> dict[str, dict[str, Any]]:
    """`cascade.defaults` (the size's per-stage settings), then `cascade.set` on top.

    With `cascade.stop_on_forgetting` every on-policy stage also gets the
    in-stage guard at `cascade.forgetting_tolerance`, and with `cascade.seed`
    every stage of the chain its `train.seed` (both before `cascade.set`).
    """
    out = overrides_lib.parse_per_stage(spec.defaults, "config.cascade.defaults")
    if spec.seed >= 0:
        for stage in spec.chain:
            out.setdefault(stage, {})["train.seed"] = spec.seed
    if spec.stop_on_forgetting:
        for stage in (s.name for s in stage_registry.STAGES.values() if s.on_policy):
            out.setdefault(stage, {}).update(
                {"eval.guard_tolerance": spec.forgetting_tolerance, "eval.guard_stop": True}
            )
    for stage, fields in overrides_lib.parse_per_stage(spec.set, "config.cascade.set").items():
        out.setdefault(stage, {}).update(fields)
    return out


def _best_stage(domain: str, mode: str, matrices: Mapping[str, Mapping[str, float]]) -> str:
    """The stage of `matrices` with the best `mode` headline score of `domain` (later on ties)."""
    key = report.headline_key(domain, mode)
    best = None
    for stage, metrics in matrices.items():
        keys = suites_lib.domain_keys(metrics, domain, mode) or [key]
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
    return best[0]


def select_teachers(
    domains: Sequence[str],
    matrices: Mapping[str, Mapping[str, float]],
    modes: Sequence[str] = (),
) -> dict[str, str]:
    """{domain: stage} whose eval matrix has the best thinking-mode headline score.

    `matrices` is {stage: eval-matrix metrics} in chain order; the score is
    the mean thinking-mode pass@1 of the stage's benchmark suites of that
    domain (`eval.suites`: HumanEval for code, GSM8K for math, ...) when it
    has any, else `<domain>/thinking/pass@1` (`chat/thinking/gold` for chat);
    ties go to the later stage (it has seen more of the chain). This is the
    paper's "strongest validation checkpoint per benchmark category" (C2 §4.4)
    over the chain. With `modes` (`rl.teacher_per_mode`), each mode's score
    picks its own stage: a domain whose modes pick different stages gets
    `domain/mode` keys (`config.parse_teachers`).
    """
    out = {}
    for domain in domains:
        picks = {m: _best_stage(domain, m, matrices) for m in modes or ("thinking",)}
        if len(set(picks.values())) == 1:
            out[domain] = next(iter(picks.values()))
        else:
            out.update({f"{domain}/{m}": stage for m, stage in picks.items()})
    return out


def _teachers_from_chain(rl: config_lib.RLConfig, workdir: str, earlier: Sequence[str]) -> str:
    """`rl.teachers` for MOPD from the finished earlier policy stages in `workdir`."""
    done = [s for s in earlier if checkpointing.is_done(os.path.join(workdir, s))]
    modes = rl.train_modes if rl.teacher_per_mode else ()
    chosen = select_teachers(rl.domains, report.collect(workdir, done), modes)
    logging.info("[cascade] MOPD teachers: %s", chosen)
    return ",".join(f"{k}={os.path.join(os.path.abspath(workdir), s)}" for k, s in chosen.items())


def stage_config(
    name: str,
    size: str,
    overrides: dict[str, Any],
    init_from: str,
    workdir: str,
    earlier: Sequence[str] = (),
) -> config_lib.Config:
    """Loads `configs/<name>.py:<size>`, applies the cascade's overrides and hand-off.

    A distillation stage (MOPD) without explicit `rl.teachers` gets them from
    `earlier` (the policy stages before it in the chain) by `select_teachers`.
    """
    cd = overrides_lib.load_stage_config(name, size)
    cd.init.init_from = init_from
    if name == "rlhf":
        cd.rl.rm_from = os.path.join(workdir, "rm")
    cd = overrides_lib.apply(cd, overrides)
    cfg = config_lib.from_config_dict(cd)
    if stage_registry.get(name).kind == "distill" and not cfg.rl.teachers:
        cd.rl.teachers = _teachers_from_chain(cfg.rl, workdir, earlier)
        cfg = config_lib.from_config_dict(cd)
    return cfg


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Runs the chain named by `cfg.cascade`."""
    spec = cfg.cascade
    stages = spec.chain
    overrides = merged_overrides(spec)
    unknown = [s for s in overrides if s not in stage_registry.STAGES or s == "cascade"]
    if unknown:
        raise config_lib.ConfigError(f"config.cascade.set: unknown stage names {unknown}")
    os.makedirs(workdir, exist_ok=True)
    policy_from, sft_dir = "", os.path.join(workdir, "sft")
    policy_stages: list[str] = []
    for name in stages:
        stage_dir = os.path.join(workdir, name)
        side = stage_registry.get(name).side
        init = sft_dir if side else policy_from
        stage_cfg = stage_config(
            name, spec.size, overrides.get(name, {}), init, workdir, earlier=tuple(policy_stages)
        )
        if checkpointing.is_done(stage_dir):
            logging.info("[cascade] %s finished earlier; skipping", stage_registry.label(name))
        else:
            logging.info(
                "[cascade] ===== stage %s (init from %s) =====",
                stage_registry.label(name),
                init or "scratch",
            )
            dispatch.run(stage_cfg, workdir)
        if not side:
            policy_from = stage_dir
            policy_stages.append(name)
        flags = report.forgetting(workdir, stages, spec.forgetting_tolerance)
        for f in flags:
            logging.warning("[cascade] FORGETTING: %s", f)
        report.write(workdir, stages, spec.forgetting_tolerance)
    summary = report.collect(workdir, stages)
    with open(os.path.join(workdir, report.SUMMARY_FILE), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
