"""The GRPO step of `bench/peers.py`: math RL, thinking mode, from the bench's shared model.

    python -m nemocascade.main --config=bench/peers_grpo_config.py --workdir=/tmp/peers/nc_rl \
        --config.init.init_from=/tmp/peers/src --config.train.steps=10

What the peers run too: 16 prompts x 8 samples, 128 new tokens, temperature
1.0, the math verifier, no KL, no filtering (dynamic, overlong), one
optimizer step per batch (AdamW, constant lr). No evaluation and no
checkpoint inside the timed steps. The model shape comes from the
`model_config.json` beside `init.init_from`.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = common.rl_base("stage2_medium", "tiny")
    c.model.preset = "checkpoint"
    c.rl.update(
        domains=("math",),
        mode="thinking",
        prompts_per_step=16,
        group_size=8,
        num_prompts=160,
        max_new_tokens=128,
        temperature=1.0,
        dynamic_filter="none",
        overlong="none",
        kl_coef=0.0,
        eval_num=0,
    )
    c.optim.update(lr=1e-6)  # AdamW(0.9, 0.95), no weight decay, clip 1.0: the peers match it
    c.train.update(steps=10, eval_every=10**6, checkpoint_every=10**6, progress=False)
    c.eval.update(num_per_domain=0)
    return c
