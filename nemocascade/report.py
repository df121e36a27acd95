"""Regenerates the cascade report: `python -m nemocascade.report --workdir=DIR`."""

from __future__ import annotations

import os

from absl import app, flags

from nemocascade import stage_registry
from nemocascade.evaluation import report

_WORKDIR = flags.DEFINE_string("workdir", None, "Cascade workdir.", required=True)
_STAGES = flags.DEFINE_list("stages", None, "Stage order (default: those found, C1 order first).")
_TOL = flags.DEFINE_float("tolerance", 0.03, "Forgetting-guard tolerance (fraction).")


def main(argv):
    del argv
    if not os.path.isdir(_WORKDIR.value):
        raise app.UsageError(f"--workdir={_WORKDIR.value!r} does not exist")
    stages = _STAGES.value
    if not stages:
        order = list(dict.fromkeys(sum(stage_registry.ORDERS.values(), ())))
        stages = [s for s in order if os.path.isdir(os.path.join(_WORKDIR.value, s))]
    print(report.write(_WORKDIR.value, stages, _TOL.value))


if __name__ == "__main__":
    app.run(main)
