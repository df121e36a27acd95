"""Reward model: the policy's decoder plus a scalar head on the last token's hidden state.

As in Nemotron-Cascade's RM (a linear head on the final hidden state of the
last token, read at the closing `<|im_end|>` of the RM input), the params are

    {"backbone": <transformer params>, "head": {"kernel": [D], "bias": []}}

so the backbone is exactly a policy params tree: the RM is initialized from
the SFT export (`init_from_policy`), and shares the transformer's logical axes
(the head kernel is sharded like any `embed` dimension).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nemocascade.model import presets, transformer

# Initial head scale: scores start with a standard deviation of about this
# value whatever D is (the final-norm hidden state has unit RMS per feature),
# small enough that the first Bradley–Terry steps are near log 2, and nonzero
# so the backbone receives gradient from the first step on.
HEAD_INIT_SCALE = 0.1
HEAD_LOGICAL_AXES = {"kernel": ("embed",), "bias": ()}


def init_head(d_model: int, rng: jax.Array) -> dict[str, Any]:
    """Boxed (logically partitioned) head params, float32."""
    kernel_init = nn.initializers.normal(stddev=HEAD_INIT_SCALE / math.sqrt(d_model))
    return {
        "kernel": nn.with_logical_partitioning(kernel_init, HEAD_LOGICAL_AXES["kernel"])(
            rng, (d_model,), jnp.float32
        ),
        "bias": nn.with_logical_partitioning(nn.initializers.zeros, HEAD_LOGICAL_AXES["bias"])(
            rng, (), jnp.float32
        ),
    }


def init_params(cfg: presets.ModelConfig, rng: jax.Array) -> dict[str, Any]:
    """Boxed RM params from scratch; unbox with `nn.meta.unbox`."""
    backbone_rng, head_rng = jax.random.split(rng)
    return {
        "backbone": transformer.init_params(cfg, backbone_rng),
        "head": init_head(cfg.d_model, head_rng),
    }


def init_from_policy(policy_params: Any, rng: jax.Array) -> dict[str, Any]:
    """Unboxed RM params around (unboxed) policy params: the backbone is kept as is."""
    d_model = policy_params["embed"]["embedding"].shape[-1]
    return {"backbone": policy_params, "head": nn.meta.unbox(init_head(d_model, rng))}


def score_rows(
    params: Any,
    cfg: presets.ModelConfig,
    tokens_bt: jax.Array,
    segment_ids_bt: jax.Array,
    positions_bt: jax.Array,
    index_bk: jax.Array,
) -> jax.Array:
    """Scores of K sequences per row, read at positions `index_bk`; float32 [B, K].

    Rows may pack several sequences (segment ids 1, 2, …, 0 for padding;
    positions restart at 0 per sequence); `index_bk[b, k]` is the position of
    the last token of the k-th sequence of row b. Attention stays within a
    sequence, so each score is that of the sequence alone. The readout is a
    per-row gather, so rows never leave their shard.
    """
    hidden_btd, _ = transformer.Transformer(cfg).apply(
        {"params": params["backbone"]}, tokens_bt, positions_bt, segment_ids_bt
    )
    t = tokens_bt.shape[1]
    idx_bk1 = jnp.clip(index_bk.astype(jnp.int32), 0, t - 1)[..., None]
    h_bkd = jnp.take_along_axis(hidden_btd, idx_bk1, axis=1).astype(jnp.float32)
    head = params["head"]
    return jnp.einsum("bkd,d->bk", h_bkd, head["kernel"]) + head["bias"]


def score(
    params: Any,
    cfg: presets.ModelConfig,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    last_b: jax.Array,
) -> jax.Array:
    """r_b = ⟨h_b, kernel⟩ + bias, h_b the final hidden state at `last_b`; float32 [B].

    One right-padded sequence per row (`mask_bt` 1 on real tokens); causality
    makes the score independent of anything after `last_b`.
    """
    b, t = tokens_bt.shape
    positions_bt = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    segment_ids_bt = mask_bt.astype(jnp.int32)
    return score_rows(params, cfg, tokens_bt, segment_ids_bt, positions_bt, last_b[:, None])[:, 0]
