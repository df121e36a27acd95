"""`jax.nn.dot_product_attention` with the reference's slot/segment mask.

JAX picks the backend implementation (`implementation=None`): cuDNN fused
attention on GPUs that support the shapes, otherwise XLA. GQA is native (K
kv heads shared by N/K query heads). The mask goes in as a boolean
`[B, 1, T, S]` array, so the XLA path materializes scores like the reference;
this implementation is about using cuDNN's kernel, not about memory on CPU.

Differences from the reference, on rows every loss masks out: a query that sees
no key gets JAX's fully-masked-row output instead of uniform weights.
"""

from __future__ import annotations

import jax

from nemocascade.kernels.attention import reference


def attention(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs) -> jax.Array:
    """Slot/segment-masked GQA attention `[B, T, N, H]` (output in `v`'s dtype)."""
    mask = reference.mask_bts(q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)[:, None]
    dtype = q_btnh.dtype
    out = jax.nn.dot_product_attention(
        q_btnh, k_bskh.astype(dtype), v_bskh.astype(dtype), mask=mask
    )
    return out.astype(v_bskh.dtype)
