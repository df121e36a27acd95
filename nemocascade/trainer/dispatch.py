"""Maps `config.stage` to the stage runner (`stage_registry`)."""

from __future__ import annotations

import importlib

from nemocascade import config as config_lib, stage_registry


def run(cfg: config_lib.Config, workdir: str):
    if cfg.stage not in stage_registry.STAGES:
        raise config_lib.ConfigError(
            f"config.stage={cfg.stage!r} has no runner; stages: {', '.join(stage_registry.NAMES)}"
        )
    return importlib.import_module(stage_registry.get(cfg.stage).runner).run(cfg, workdir)
