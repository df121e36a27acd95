"""RLHF: GRPO on chat prompts, rewarded by the reward model, half thinking / half instruct.

    python -m nemocascade.main --config=configs/rlhf.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/sft

(the RM is read from `/tmp/nc/rm`, written by `configs/rm.py`; set
`--config.rl.rm_from=DIR/rm` to use another one). `:tiny` on 2 CPU cores:
about 2 minutes (20 steps of 8 prompts × 8 rollouts at temperature 0.6); the RM score of the
rollouts rises, and whether the held-out chat gold rubric score (never a
training signal) follows depends on how well the RM, trained on the SFT
model's own pairs, agrees with the rubric: `docs/results.md` has a run where
both modes rose and one where they fell.

Paper (C1 §4.3, Table 15): the RM scores the answer after `</think>` only; an
unfinished think block is scored on its whole text (an implicit length
penalty); max response 12K, no overlong filtering, 8 rollouts, temperature
0.6, top-p 0.95, lr 2e-6, AdamW β=(0.9, 0.95), entropy 0, KL 0, token-level
loss; each batch is half thinking, half instruct prompts; ~800 steps (8B),
900 (14B). Math and code prompts are excluded (chat only).
Stabilizers for a weaker RM that starts to collapse (C1 Table 10), off by
default: `--config.rl.kl_coef=1e-3 --config.rl.aggregation=seq_mean_token_mean
--config.rl.reward_shaping=zscore_tanh`.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.rl_base("rlhf", size)
    c.rl.update(
        domains=("chat",),
        reward="rm",
        rm_from="",  # "" = DIR/rm
        mode="half_half",
        overlong="none",  # truncated answers keep their (low) RM score
        dynamic_filter="none",
        advantage="grpo",
        kl_coef=0.0,  # paper stabilizer: 1e-3
        kl_kind="k3",
        aggregation="token_mean",  # paper stabilizer: seq_mean_token_mean
        reward_shaping="none",  # paper stabilizer: zscore_tanh
        entropy_coef=0.0,
        thinking_budget=0,  # only the length cap, as in the paper
    )
    if size in ("tiny", "small"):
        # The paper's temperature 0.6: at 1.0 the sampled answers stopped while
        # the greedy ones ran on (chat truncations 31% -> 67%), and the gold
        # score fell with the RM's rising (docs/results.md, "Recipe").
        c.rl.update(max_new_tokens=96, temperature=0.6, top_p=1.0, prompts_per_step=8, group_size=8)
        c.train.update(steps=20, eval_every=10, checkpoint_every=10)
    else:
        c.rl.update(max_new_tokens=12_288, temperature=0.6, top_p=0.95, top_k=0)
        c.train.update(steps=800 if size == "8b" else 900, seq_len=12_288 + 2048)
    return c
