"""The whole Cascade RL chain on the built-in world: the README's main job.

    python -m nemocascade.main --config=configs/cascade.py:tiny --workdir=/tmp/nc

`:tiny` runs the Cascade 1 order, SFT → RM → RLHF → IF-RL → math RL → code RL → SWE RL,
then a final MOPD from the best earlier stage per domain (docs/results.md,
"Recipe": it won back most of what code RL took from math),
each stage with its own `configs/<stage>.py:tiny`, initialized from the
previous stage; `:tiny_c1` is the paper's C1 order without the final MOPD.
`:tiny_c2` runs the Cascade 2 order, SFT → IF-RL → math RL → MOPD → RM →
RLHF → code RL → SWE RL, and the same final MOPD (`mopd_final`); the
paper's C2 order alone is `--config.cascade.order=c2`. Rerunning the command
skips finished stages and resumes an interrupted one. Writes
`DIR/<stage>/eval_matrix.json` after every stage and `DIR/report.md`.

`--config.cascade.stop_on_forgetting=True` lets each on-policy stage stop at a
drop of a cell it does not train (`forgetting_tolerance`) and keep its last
passing params. Run a subset with `--config.cascade.stages=sft,rm`; change
any stage's field with
`--config.cascade.set='stage2_medium.train.steps=10;sft.optim.lr=1e-3'`
(applied after `config.cascade.defaults`, the size's own per-stage settings).
`--config.cascade.seed=S` gives every stage `train.seed=S` (one run of a
several-seed table: docs/results.md, "Several seeds").
"""

import ml_collections

from configs import common

# The RM trains on 3,200 pairs here (its own `:tiny` uses 12,800), which keeps
# the whole chain's time down (docs/results.md has the measured chain times).
TINY_DEFAULTS = "rm.data.num_examples=3200"
# In the C2 order MOPD runs right after math RL, its math teacher: there is no
# math gap to distil, and `configs/mopd.py`'s math-first prompt mix only added
# drift (math/thinking -4.2 +- 3.9 with it, +2.6 +- 5.9 with equal shares, three
# seeds; docs/results.md, "Keeping what earlier stages won").
# C2's math RL keeps a KL 0.1 to its start (IF-RL's policy): +11.5 +- 17.4 on its
# own cell with it, +8.9 +- 17.6 without (three seeds; docs/results.md).
TINY_C2_DEFAULTS = TINY_DEFAULTS + ";mopd.rl.domain_weights=();stage2_medium.rl.kl_coef=0.1"


# tiny: each order with a final MOPD, the measured recipe (docs/results.md,
# "Keeping what earlier stages won"); `:tiny_c1` keeps the paper's C1 alone.
_TINY_ORDERS = {"": "c1_mopd", "c1": "c1", "c2": "c2_mopd"}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size, _, order = (arg or "tiny").partition("_")
    c = common.base("cascade", common.parse_arg(size))
    defaults = ""  # per-stage settings of this size, applied before `cascade.set`
    if size == "tiny":
        order = _TINY_ORDERS.get(order, order)
        defaults = TINY_C2_DEFAULTS if order.startswith("c2") else TINY_DEFAULTS
    # The `cascade` section's fields: nemocascade/config.py `CascadeConfig`.
    c.cascade.update(order=order or "c1", size=size, defaults=defaults)
    return c
