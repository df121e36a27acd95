"""MOPD: multi-domain on-policy distillation from per-domain teachers (Cascade 2 order).

    python -m nemocascade.main --config=configs/mopd.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/stage2_medium \
        --config.rl.teachers=math=/tmp/nc/sft,if=/tmp/nc/stage1_short,code=/tmp/nc/sft,chat=/tmp/nc/sft

Inside the cascade (`configs/cascade.py:tiny`, `:tiny_c2`) `rl.teachers` is filled
from the earlier stages: per domain, the stage with the best thinking-mode
headline score in its eval matrix (with `rl.teacher_per_mode`, each sampled
mode's own best stage). The student samples, each response is scored by its
domain's teacher, and the loss follows the reverse-KL token advantage with a
truncated importance weight (band [0.5, 2]); metrics `advantage_mean` (→ 0
as the student matches its teachers), `gated_frac`, `teacher_gap/<domain>`
(`<domain>/<mode>` for a per-mode teacher). `:tiny` settings: 16 prompts × 4,
lr 2e-5 warmed up from 0.1× over 5 steps, 40 steps (docs/results.md, "Recipe").

Paper (C2 §4.4, prose): 128 prompts × 4 rollouts, lr 2e-6 with linear
warm-up from 2e-7 over the first 30 steps, converges in 40–50 steps (Table 8:
52 steps, lr 3e-6), temperature 1.0, top-p 1.0, no overlong filtering,
AdamW β=(0.9, 0.95), thinking mode. Max response: the paper's 98K exceeds
the Qwen3 presets' 40,960-token context, so `:8b`/`:14b` use 36,864; for the
paper's length add `--config.rl.max_new_tokens=98304
--config.train.seq_len=102400 --config.model.max_seq_len=102400`.
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.rl_base("mopd", size)
    c.rl.update(
        domains=("math", "if", "code", "chat"),
        teachers="",  # "domain=dir,..."; the cascade fills it from earlier stages
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        overlong="none",
        dynamic_filter="none",
        kl_coef=0.0,
        entropy_coef=0.0,
        group_size=4,
    )
    c.optim.update(schedule="constant", warmup_init_ratio=0.1)
    if size in ("tiny", "small"):
        # Both modes: the tiny cascade trains a unified model whose IF stage is instruct-only.
        c.rl.update(mode="half_half", prompts_per_step=16, max_new_tokens=128, eval_num=32)
        # lr 5e-5 let math drift down by 5-20 points while the teachers agreed
        # with the student (advantages ~0); 2e-5 for 40 steps recovered every
        # distilled domain (docs/results.md, "Recipe").
        c.optim.update(lr=2e-5, warmup_steps=5)
        # Four math prompts to one of each other domain: math is what code RL
        # takes, and its teacher-student gap is a few tokens per trace
        # (docs/results.md, "Keeping what earlier stages won").
        c.rl.update(domain_weights=(4.0, 1.0, 1.0, 1.0))
        c.train.update(steps=40, batch_size=64, eval_every=10, checkpoint_every=10)
    else:
        c.rl.update(mode="thinking", prompts_per_step=128, max_new_tokens=36_864)
        c.optim.update(lr=2e-6, warmup_steps=30)
        c.train.update(steps=52, batch_size=512, num_microbatches=64, seq_len=40_960)
        # One sequence per chip per micro-batch on (1, 8, 8); long-context memory.
        c.model.mlp_seq_chunk = 2048  # docs/kernels.md
    return c
