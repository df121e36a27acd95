"""Maps `config.stage` to the stage runner."""

from __future__ import annotations

import importlib

from nemocascade import config as config_lib

_RUNNERS = {
    "sft": "nemocascade.trainer.stages.sft",
    "stage1_short": "nemocascade.trainer.stages.rl",
    "stage2_medium": "nemocascade.trainer.stages.rl",
    "stage3_long": "nemocascade.trainer.stages.rl",
    "rlhf": "nemocascade.trainer.stages.rl",
    "rm": "nemocascade.trainer.stages.rm",
    "mopd": "nemocascade.trainer.stages.distill",
    "cascade": "nemocascade.trainer.cascade",
}


def run(cfg: config_lib.Config, workdir: str):
    if cfg.stage not in _RUNNERS:
        raise config_lib.ConfigError(
            f"config.stage={cfg.stage!r} has no runner; available: {sorted(_RUNNERS)}"
        )
    return importlib.import_module(_RUNNERS[cfg.stage]).run(cfg, workdir)
