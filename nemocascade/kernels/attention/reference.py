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
    return _attention("bskh", q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)


def attention_heads_major(
    q_btnh, k_bksh, v_bksh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs
) -> jax.Array:
    """`attention` with keys and values laid out `[B, K, S, H]` (the KV cache's layout)."""
    return _attention("bksh", q_btnh, k_bksh, v_bksh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)


def _attention(kv: str, q_btnh, k, v, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs) -> jax.Array:
    b, t, n, h = q_btnh.shape
    num_kv = k.shape[kv.index("k")]
    q_btkgh = q_btnh.reshape(b, t, num_kv, n // num_kv, h)
    scores = jnp.einsum(
        f"btkgh,{kv}->bkgts",
        q_btkgh,
        k.astype(q_btkgh.dtype),
        preferred_element_type=jnp.float32,
    ) * (h**-0.5)
    mask = mask_bts(q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    scores = jnp.where(mask[:, None, None], scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    if kv == "bksh":
        # [B, K] batch dims on both sides: a plain batched matmul on the cache's layout.
        out_bkgth = jnp.einsum("bkgts,bksh->bkgth", probs, v.astype(probs.dtype))
        return jnp.transpose(out_bkgth, (0, 3, 1, 2, 4)).reshape(b, t, n, h)
    out_btkgh = jnp.einsum(f"bkgts,{kv}->btkgh", probs, v.astype(probs.dtype))
    return out_btkgh.reshape(b, t, n, h)
