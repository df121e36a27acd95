"""Regenerates the cascade report.

python -m nemocascade.report --workdir=DIR                 # one run: DIR/report.md
python -m nemocascade.report --workdirs=A,B,C --out=OUT    # seeds: mean ± sd, OUT/report.md
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from nemocascade import stage_registry
from nemocascade.evaluation import report, seeds_report

_WORKDIR = flags.DEFINE_string("workdir", None, "Cascade workdir (one run).")
_WORKDIRS = flags.DEFINE_list("workdirs", None, "Cascade workdirs, one per seed (with --out).")
_OUT = flags.DEFINE_string("out", None, "Output folder of the --workdirs report.")
_STAGES = flags.DEFINE_list(
    "stages", None, "Stage order (default: the chain a finished run recorded, else C1 order first)."
)
_TOL = flags.DEFINE_float("tolerance", 0.03, "Forgetting-guard tolerance (fraction).")
_NUM_PROMPTS = flags.DEFINE_integer(
    "num_prompts", 64, "--workdirs: prompts per cell where no stage config.json records it."
)


def _found_stages(workdirs: list[str]) -> list[str]:
    """The stages in the workdirs, in the chain order a finished run recorded.

    A finished cascade's `cascade_summary.json` lists its stages in chain
    order; without one (an unfinished run) the registry's orders give it, C1
    first.
    """
    order: list[str] = []
    for w in workdirs:
        summary = os.path.join(w, report.SUMMARY_FILE)
        if os.path.exists(summary):
            with open(summary) as f:
                order = list(json.load(f))
            break
    order = list(dict.fromkeys(order + list(sum(stage_registry.ORDERS.values(), ()))))
    return [s for s in order if any(os.path.isdir(os.path.join(w, s)) for w in workdirs)]


def main(argv):
    del argv
    if _WORKDIRS.value is not None:
        if _WORKDIR.value is not None:
            raise app.UsageError("give --workdir (one run) or --workdirs (seeds), not both")
        workdirs = [w for w in _WORKDIRS.value if w]
        if len(workdirs) < 2:
            raise app.UsageError(f"--workdirs needs at least 2 workdirs, got {workdirs}")
        for w in workdirs:
            if not os.path.isdir(w):
                raise app.UsageError(f"--workdirs: {w!r} does not exist")
        if not _OUT.value:
            raise app.UsageError("--workdirs needs --out=DIR (where the seeds report goes)")
        stages = _STAGES.value or _found_stages(workdirs)
        print(seeds_report.write(workdirs, stages, _OUT.value, _TOL.value, _NUM_PROMPTS.value))
        return
    if _WORKDIR.value is None:
        raise app.UsageError("give --workdir=DIR (one run) or --workdirs=A,B,C --out=DIR")
    if _OUT.value:
        raise app.UsageError("--out goes with --workdirs; --workdir writes DIR/report.md")
    if not os.path.isdir(_WORKDIR.value):
        raise app.UsageError(f"--workdir={_WORKDIR.value!r} does not exist")
    stages = _STAGES.value or _found_stages([_WORKDIR.value])
    print(report.write(_WORKDIR.value, stages, _TOL.value))


if __name__ == "__main__":
    app.run(main)
