"""The stages: one registry of names, kinds, roles and the cascade orders.

Every place that needs to know about stages reads it here: the config (valid
`config.stage` values), the dispatcher (which runner trains a stage), the
cascade (orders, which stages are on-policy, which hand nothing on), the sweep
(which directories a run writes) and the report and logs (what each stage
trains). The launch names `stage1_short`, `stage2_medium` and `stage3_long`
are the documented ones; their role says which RL problem each is.
"""

from __future__ import annotations

import dataclasses

# Stage kind -> the module whose `run(cfg, workdir)` trains it.
RUNNERS = {
    "sft": "nemocascade.trainer.stages.sft",
    "rm": "nemocascade.trainer.stages.rm",
    "rl": "nemocascade.trainer.stages.rl",
    "distill": "nemocascade.trainer.stages.distill",
    "cascade": "nemocascade.trainer.cascade",
}


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # a key of RUNNERS
    role: str  # what the stage trains, for docs, logs and the report
    side: bool = False  # trains beside the policy chain and hands no policy on (the RM)

    @property
    def on_policy(self) -> bool:
        """Samples from the current policy each step (the on-policy driver's stages)."""
        return self.kind in ("rl", "distill")

    @property
    def runner(self) -> str:
        return RUNNERS[self.kind]


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("sft", "sft", "SFT (instruct + thinking traces)"),
        Stage("rm", "rm", "reward model", side=True),
        Stage("rlhf", "rl", "RLHF"),
        Stage("stage1_short", "rl", "IF-RL"),
        Stage("stage2_medium", "rl", "math RL"),
        Stage("stage3_long", "rl", "code RL"),
        Stage("stage4_swe", "rl", "SWE RL"),
        Stage("mopd", "distill", "multi-domain on-policy distillation"),
        # A second MOPD for chains that already have one (C2's recipe): the
        # same stage, run once more at the end under its own directory.
        Stage("mopd_final", "distill", "final multi-domain on-policy distillation"),
        Stage("cascade", "cascade", "the chain of stages"),
    )
}
NAMES = tuple(STAGES)

# The cascade orders of the two papers (Cascade 1 §4, Cascade 2 §4), and each
# with a final MOPD from the best earlier checkpoint per domain appended (the
# tiny cascades' recipe, docs/results.md "Keeping what earlier stages won").
_C1 = ("sft", "rm", "rlhf", "stage1_short", "stage2_medium", "stage3_long", "stage4_swe")
_C2 = ("sft", "stage1_short", "stage2_medium", "mopd", "rm", "rlhf", "stage3_long", "stage4_swe")
ORDERS: dict[str, tuple[str, ...]] = {
    "c1": _C1,
    "c1_mopd": (*_C1, "mopd"),
    "c2": _C2,
    "c2_mopd": (*_C2, "mopd_final"),
}


def get(name: str) -> Stage:
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(NAMES)}")
    return STAGES[name]


def chain(order: str, stages: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The stages a cascade runs: `stages` when given, else the order's."""
    if order not in ORDERS:
        raise KeyError(f"unknown cascade order {order!r}; orders: {', '.join(ORDERS)}")
    return tuple(stages) or ORDERS[order]


def label(name: str) -> str:
    """'stage1_short [IF-RL]'; a name the registry does not know stays as it is."""
    return f"{name} [{STAGES[name].role}]" if name in STAGES else name
