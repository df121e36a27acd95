"""Reward model: Bradley–Terry on preference pairs, backbone initialized from SFT.

    python -m nemocascade.main --config=configs/rm.py:tiny --workdir=/tmp/nc \
        --config.init.init_from=/tmp/nc/sft

`:tiny` on 2 CPU cores: 12,800 built-in chat pairs (gold-rubric labels, 10%
flipped), one epoch = 400 steps of 32 pairs, about 10 minutes at ~3.5k
tokens/s; held-out (512 eval-split pairs) `pairwise_accuracy` against the
gold preference 0.44 → 0.88, `pairwise_accuracy_noisy` (against the flipped
labels) 0.80, in `DIR/rm/metrics.jsonl`. Accuracy is set by the pairs seen:
`--config.data.num_examples=3200` takes ~2.5 minutes and reaches ~0.77.
Params go to `DIR/rm/export`, which RLHF reads (`config.rl.rm_from`).
Paper (C1 §4.2): a linear head on the last token's hidden state, batch 256,
lr 2e-6, AdamW, one epoch (longer was worse) over 82K pairs (HelpSteer2/3 and
synthetic hard negatives): `:8b`/`:14b` with `--config.data.files=PAIRS.jsonl
--config.data.eval_files=HELD_OUT.jsonl` (`{"prompt", "chosen", "rejected"}`, docs/data.md).
Here the RM has the policy's shape (the paper's is a 72B model).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    size = common.parse_arg(arg)
    c = common.base("rm", size)
    # steps = 0: `rm.epochs` passes over the pairs (pairs / batch steps).
    c.rm.update(noise=0.1, margin=0.0, epochs=1.0, rows_per_pair=0.5)
    if size in ("tiny", "small"):
        # Held-out gold accuracy grows with the pairs seen (one epoch each) and
        # hardly with lr (2e-4..2e-3) or batch (16, 32): ~0.77 at 3200 pairs,
        # ~0.80 at 6400, ~0.82-0.85 at 9600, ~0.88 at 12800.
        c.optim.update(
            lr=5e-4,
            warmup_steps=10,
            schedule="cosine",
            min_lr_ratio=0.1,
            weight_decay=0.0,
            grad_clip=1.0,
        )
        c.train.update(
            steps=0, batch_size=32, seq_len=160, log_every=20, eval_every=100, checkpoint_every=100
        )
        c.data.update(num_examples=12_800, eval_examples=512)
    else:
        c.optim.update(
            lr=2e-6,
            warmup_steps=10,
            schedule="cosine",
            min_lr_ratio=0.0,
            b1=0.9,
            b2=0.95,
            weight_decay=0.0,
            grad_clip=1.0,
        )
        c.train.update(
            steps=0,
            batch_size=256,
            seq_len=8192,
            num_microbatches=16,
            log_every=10,
            eval_every=100,
            checkpoint_every=100,
        )
        c.data.update(num_examples=82_000, eval_examples=2048)
    return c
