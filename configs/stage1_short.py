"""Stage 1: instruction-following RL (IF-RL), instruct mode, short responses.

    python -m nemocascade.main --config=configs/stage1_short.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/sft

Paper (C1 §4.4, Table 16): unified model trained in non-thinking mode only,
rule-verifier reward (all constraints hold), batch 128 × 8, lr 2e-6,
temperature 0.6 / top-p 0.95 / top-k 20, dynamic filtering, no KL.
`:tiny`: a few minutes on 2 CPU cores; raises held-out IF pass@1 (instruct).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.rl_base("stage1_short", size)
    c.rl.update(domains=("if",), mode="instruct", dynamic_filter="batch", overlong="zero_reward")
    if size in ("tiny", "small"):
        c.rl.update(max_new_tokens=64)
    else:
        c.rl.update(max_new_tokens=8192, temperature=0.6, top_p=0.95, top_k=20)
        c.train.update(steps=2300, seq_len=8192 + 2048)
    return c
