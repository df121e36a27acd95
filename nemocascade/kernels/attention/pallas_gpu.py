"""JAX's Pallas GPU flash attention (`jax.experimental.pallas.ops.gpu.attention.mha`).

Self-attention of packed sequences only: keys are the queries' own tokens at
slots 0..T-1 (the kernel's `causal=True`), one `segment_ids [B, T]` array for
queries and keys. The kernel has no GQA, so the `K` kv heads are repeated to
`N` heads before the call (the repeat's gradient sums them back).

Differences from the reference, on rows every loss masks out: a padding query
(segment 0) attends the padding keys up to itself instead of uniformly to all
keys. The kernel is Triton-based (forward and backward kernels); on CPU it runs
only with `interpret=True`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import attention as gpu_attention

DEFAULT_BLOCK = 128


def supports(t: int, s: int, block: int = DEFAULT_BLOCK) -> bool:
    """Whether a `[T]` x `[S]` self-attention call fits the kernel's tiling."""
    b = min(block, t)
    return t == s and t % b == 0 and b & (b - 1) == 0


def attention(
    q_btnh, k_btkh, v_btkh, seg_bt, *, block: int = DEFAULT_BLOCK, interpret: bool = False
) -> jax.Array:
    """Causal, segment-masked GQA self-attention `[B, T, N, H]` (output in `v`'s dtype)."""
    b, t, n, h = q_btnh.shape
    g = n // k_btkh.shape[2]
    k_btnh = jnp.repeat(k_btkh.astype(q_btnh.dtype), g, axis=2)
    v_btnh = jnp.repeat(v_btkh.astype(q_btnh.dtype), g, axis=2)
    bq = min(block, t)
    sizes = gpu_attention.BlockSizes(
        block_q=bq,
        block_k=bq,
        block_q_dkv=min(32, bq),
        block_kv_dkv=min(32, bq),
        block_q_dq=min(32, bq),
        block_kv_dq=min(32, bq),
    )
    out = gpu_attention.mha(
        q_btnh,
        k_btnh,
        v_btnh,
        seg_bt,
        sm_scale=h**-0.5,
        causal=True,
        block_sizes=sizes,
        interpret=interpret,
    )
    return out.astype(v_btkh.dtype)
