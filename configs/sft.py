"""SFT on both decoding modes (parallel thinking / instruct answers).

    python -m nemocascade.main --config=configs/sft.py:tiny --workdir=/tmp/nc

`:tiny` on 2 CPU cores: ~1.8M-parameter model, 480 steps of 16 × 320 packed
tokens (1.1–1.3 s each on a nearly idle machine), about 10 minutes;
held-out loss falls from ~6.9 to ~0.16. The domain mix leans on math
(weights math 3.0, code 1.2, if 1.6, chat 0.4, swe 0.6 × 6000 examples): the
column-by-column traces are what make thinking mode beat instruct mode, and
they need the most tokens to learn. The swe examples are long (prompt and
completion up to ~300 tokens, hence rows of 320; about a fifth of the
tokens); the 80 steps added with them keep the other domains' token count.
Paper (C1 Table 14): batch 256, lr 5e-5 cosine to 0, AdamW β=(0.9, 0.95),
weight decay 1e-4 (`:8b`, `:14b`).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.base("sft", size)
    if size in ("tiny", "small"):
        c.optim.update(
            lr=2e-3,
            warmup_steps=40,
            schedule="cosine",
            min_lr_ratio=0.05,
            weight_decay=1e-4,
            grad_clip=1.0,
        )
        c.train.update(
            steps=480,
            batch_size=16,
            seq_len=320,
            log_every=20,
            eval_every=200,
            checkpoint_every=200,
        )
        c.data.update(
            num_examples=6000,
            pack=True,
            eval_examples=64,
            domain_weights=(3.0, 1.2, 1.6, 0.4, 0.6),
        )
        if size == "small":
            c.train.update(steps=300, batch_size=16)
    else:
        c.optim.update(
            lr=5e-5,
            warmup_steps=200,
            schedule="cosine",
            min_lr_ratio=0.0,
            weight_decay=1e-4,
            grad_clip=1.0,
        )
        c.train.update(
            steps=20_000,
            batch_size=256,
            seq_len=16_384,
            num_microbatches=16,
            log_every=10,
            eval_every=1000,
            checkpoint_every=500,
        )
        c.data.update(pack=True, num_examples=0)
    return c
