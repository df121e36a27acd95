"""Query-blocked XLA attention: the reference, one block of queries at a time.

The queries are cut into blocks of `block_q` rows; `lax.map` runs the
reference on each block against all keys under `jax.checkpoint`, so the
forward holds one `[B, K, G, block_q, S]` score tile and the backward keeps
no scores at all (each block's tile is recomputed when its gradient is
formed). Peak memory is O(T · block_q) instead of O(T²), on every platform.

Each row's softmax is over the full key range, exactly as in the reference
(no online rescaling), so values agree with `reference.attention` to float32
rounding. The price is recomputing the score tile in the backward (about one
extra forward of attention FLOPs).

A length that is not a multiple of `block_q` is padded with padding queries
(segment 0) whose rows are dropped again.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nemocascade.kernels.attention import reference

DEFAULT_BLOCK_Q = 512


def attention(
    q_btnh,
    k_bskh,
    v_bskh,
    q_slot_bt,
    q_seg_bt,
    k_slot_bs,
    k_seg_bs,
    *,
    block_q: int = DEFAULT_BLOCK_Q,
) -> jax.Array:
    """`reference.attention`, computed `block_q` queries at a time."""
    b, t, n, h = q_btnh.shape
    if t <= block_q:
        return reference.attention(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    num_blocks = -(-t // block_q)
    pad = num_blocks * block_q - t
    if pad:
        q_btnh = jnp.pad(q_btnh, ((0, 0), (0, pad), (0, 0), (0, 0)))
        q_slot_bt = jnp.pad(q_slot_bt, ((0, 0), (0, pad)))
        q_seg_bt = jnp.pad(q_seg_bt, ((0, 0), (0, pad)))

    def blocks(x):  # [B, T, ...] -> [num_blocks, B, block_q, ...]
        x = x.reshape(b, num_blocks, block_q, *x.shape[2:])
        return jnp.moveaxis(x, 1, 0)

    @jax.checkpoint
    def one_block(q, slot, seg):
        return reference.attention(q, k_bskh, v_bskh, slot, seg, k_slot_bs, k_seg_bs)

    out = jax.lax.map(
        lambda a: one_block(*a), (blocks(q_btnh), blocks(q_slot_bt), blocks(q_seg_bt))
    )
    out = jnp.moveaxis(out, 0, 1).reshape(b, num_blocks * block_q, n, h)
    return out[:, :t]
