"""A final MOPD at the end of a chain that already has one (the C2 recipe).

`configs/cascade.py:tiny_c2` runs the Cascade 2 order, whose MOPD comes right
after math RL, then this stage after SWE RL: the distillation of
`configs/mopd.py` (every setting, the paper's included), under its own
directory `mopd_final/`, with teachers picked from every earlier policy stage
(docs/results.md, "Keeping what earlier stages won"). At `:tiny`/`:small` it
also distils SWE and picks a teacher per domain and mode (`rl.teacher_per_mode`).

    python -m nemocascade.main --config=configs/mopd_final.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/stage4_swe \
        --config.rl.teachers=math=/tmp/nc/rlhf,if=/tmp/nc/stage1_short,code=/tmp/nc/stage3_long,chat=/tmp/nc/rlhf,swe/thinking=/tmp/nc/stage4_swe,swe/instruct=/tmp/nc/stage3_long
"""

import ml_collections

from configs import mopd


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = mopd.get_config(arg)
    c.stage = "mopd_final"
    if c.rl.mode == "half_half":  # tiny, small
        # After SWE RL: SWE joins the distilled domains, and each mode gets the stage
        # with its best cell as teacher (SWE RL trains thinking only, so the best
        # swe/instruct stage can be an earlier one; docs/results.md, "Keeping what
        # earlier stages won").
        c.rl.update(
            domains=(*c.rl.domains, "swe"),
            domain_weights=(*c.rl.domain_weights, 1.0),
            teacher_per_mode=True,
        )
    return c
