"""Stage 2: math RL, thinking mode, medium responses with a length curriculum.

    python -m nemocascade.main --config=configs/stage2_medium.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/stage1_short

Paper (C1 §4.5, Tables 17–18): exact-answer reward, response-length
curriculum 24K → 32K → 40K with temperature 1.0 → 0.8, overlong filtering in
the first sub-stage only, epoch-level dynamic filtering (resample solved
prompts with p=0.01, unsolved with p=0.1), batch 128 × 8, lr 2e-6.
`:tiny`: a few minutes on 2 CPU cores; raises held-out math pass@1 (thinking).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.rl_base("stage2_medium", size)
    c.rl.update(
        domains=("math",),
        mode="thinking",
        dynamic_filter="epoch",
        overlong="filter",
        resample_easy=0.01,
        resample_hard=0.1,
    )
    if size in ("tiny", "small"):
        # A small prompt pool so epoch-level filtering acts within the run:
        # after the first pass, solved/unsolved prompts are mostly skipped.
        c.rl.update(
            num_prompts=128,
            curriculum=[
                {"steps": 12, "max_new_tokens": 128, "temperature": 0.6},
                {"steps": 12, "max_new_tokens": 160, "temperature": 0.6},
            ],
        )
    else:
        c.rl.update(
            curriculum=[
                {"steps": 200, "max_new_tokens": 24_576, "temperature": 1.0},
                {"steps": 150, "max_new_tokens": 32_768, "temperature": 0.8},
                {"steps": 150, "max_new_tokens": 40_960, "temperature": 0.8},
            ],
            top_p=0.95,
        )
        c.train.update(steps=500, seq_len=40_960 + 2048)
        # Prompt + longest response exceeds the Qwen3 preset's 40,960 positions.
        c.model.max_seq_len = c.train.seq_len
        c.model.mlp_seq_chunk = 2048  # long-context memory (docs/kernels.md)
        c.train.num_microbatches = 128  # one sequence per chip on (1, 8, 8)
    return c
