"""Small shared fixtures for trainer tests: a toy config and synthetic batches."""

import dataclasses

import numpy as np

from nemocascade import config as config_lib
from nemocascade.model import presets

TOY_MODEL = presets.ModelConfig(
    vocab_size=64,
    d_model=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    d_ff=64,
    qk_norm=True,
    max_seq_len=64,
)


def toy_config(**train) -> config_lib.Config:
    base = config_lib.Config(stage="sft", model=TOY_MODEL)
    return dataclasses.replace(
        base,
        train=dataclasses.replace(base.train, batch_size=8, seq_len=16, **train),
        optim=dataclasses.replace(base.optim, lr=1e-2, warmup_steps=0),
    )


def batch(seed: int, b: int = 8, t: int = 16, vocab: int = 64) -> dict:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(b, t + 1)).astype(np.int32)
    mask = (rng.random((b, t)) < 0.7).astype(np.int32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "loss_mask": mask,
        "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
        "segment_ids": np.ones((b, t), np.int32),
    }
