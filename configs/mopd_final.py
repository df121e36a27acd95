"""A final MOPD at the end of a chain that already has one (the C2 recipe).

`configs/cascade.py:tiny_c2` runs the Cascade 2 order, whose MOPD comes right
after math RL, then this stage after SWE RL: the same distillation as
`configs/mopd.py` (every setting, the paper's included), under its own
directory `mopd_final/`, with teachers picked from every earlier policy stage
(docs/results.md, "Keeping what earlier stages won").

    python -m nemocascade.main --config=configs/mopd_final.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/stage4_swe \
        --config.rl.teachers=math=/tmp/nc/rlhf,if=/tmp/nc/stage1_short,code=/tmp/nc/stage3_long,chat=/tmp/nc/rlhf
"""

import ml_collections

from configs import mopd


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = mopd.get_config(arg)
    c.stage = "mopd_final"
    return c
