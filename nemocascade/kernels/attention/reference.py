"""The attention spec: materialized float32 scores `[B, K, G, T, S]` (impl `xla`).

    out[b, t, n] = Σ_s softmax_s(q[b,t,n] · k[b,s,n//G] / √H + mask) v[b,s,n//G]

with the mask "query at slot i sees key at slot j iff j <= i, both lie in the
same segment and the key's segment is not padding (0)". A query that sees no
key (a padding query) gets uniform weights over all keys; callers mask those
rows out of every loss. This is exactly the attention the model had before
implementations were selectable, and every other implementation is tested
against it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -1e30


def mask_bts(q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs) -> jax.Array:
    """Boolean `[B, T, S]`: which keys each query may attend."""
    return (
        (k_slot_bs[:, None, :] <= q_slot_bt[:, :, None])
        & (k_seg_bs[:, None, :] == q_seg_bt[:, :, None])
        & (k_seg_bs[:, None, :] != 0)
    )


def attention(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs) -> jax.Array:
    """`[B, T, N, H]` attention output in `v`'s dtype (see module docstring)."""
    b, t, n, h = q_btnh.shape
    k = k_bskh.shape[2]
    q_btkgh = q_btnh.reshape(b, t, k, n // k, h)
    scores = jnp.einsum(
        "btkgh,bskh->bkgts",
        q_btkgh,
        k_bskh.astype(q_btkgh.dtype),
        preferred_element_type=jnp.float32,
    ) * (h**-0.5)
    mask = mask_bts(q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    scores = jnp.where(mask[:, None, None], scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_bskh.dtype)
    out_btkgh = jnp.einsum("bkgts,bskh->btkgh", probs, v_bskh.astype(probs.dtype))
    return out_btkgh.reshape(b, t, n, h)
