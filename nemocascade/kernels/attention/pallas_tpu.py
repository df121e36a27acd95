"""JAX's Pallas TPU splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`).

Self-attention of packed sequences only: keys are the queries' own tokens at
slots 0..T-1, so the slot rule "key slot <= query slot" is the static causal
mask and the segment rule is splash's `SegmentIds`. GQA runs as `K` MQA
kernels (one per kv head, `G` query heads each), batched with `vmap`.

Differences from the reference, on rows every loss masks out: a padding query
(segment 0) attends the padding keys of its own row instead of uniformly to
all keys. Splash's kernel and its backward (dq, dkv kernels) are Mosaic
kernels; on CPU they run only with `interpret=True`.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash,
    splash_attention_mask as mask_lib,
)

DEFAULT_BLOCK = 512


def supports(t: int, s: int, block: int = DEFAULT_BLOCK) -> bool:
    """Whether a `[T]` x `[S]` self-attention call fits the kernel's tiling."""
    b = min(block, t)
    return t == s and t % b == 0 and b % 128 == 0  # the kernel's lane width


@functools.lru_cache(maxsize=32)
def _kernel(t: int, groups: int, block: int, interpret: bool):
    b = min(block, t)
    sizes = splash.BlockSizes(
        block_q=b,
        block_kv=b,
        block_kv_compute=b,
        block_q_dkv=b,
        block_kv_dkv=b,
        block_kv_dkv_compute=b,
        block_q_dq=b,
        block_kv_dq=b,
    )
    mask = mask_lib.MultiHeadMask([mask_lib.CausalMask((t, t))] * groups)
    return splash.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def attention(
    q_btnh, k_btkh, v_btkh, seg_bt, *, block: int = DEFAULT_BLOCK, interpret: bool = False
) -> jax.Array:
    """Causal, segment-masked GQA self-attention `[B, T, N, H]` (output in `v`'s dtype)."""
    b, t, n, h = q_btnh.shape
    k = k_btkh.shape[2]
    g = n // k
    kernel = _kernel(t, g, block, interpret)
    # Splash does not scale the logits; q is pre-scaled (in q's dtype).
    q_bkgth = (q_btnh * np.asarray(h**-0.5, q_btnh.dtype)).reshape(b, t, k, g, h)
    q_bkgth = q_bkgth.transpose(0, 2, 3, 1, 4)
    k_bksh = k_btkh.astype(q_btnh.dtype).transpose(0, 2, 1, 3)
    v_bksh = v_btkh.astype(q_btnh.dtype).transpose(0, 2, 1, 3)

    def one(q_gth, k_sh, v_sh, seg_t):
        return kernel(q_gth, k_sh, v_sh, segment_ids=splash.SegmentIds(q=seg_t, kv=seg_t))

    per_head = jax.vmap(one, in_axes=(0, 0, 0, None))  # over kv heads
    out_bkgth = jax.vmap(per_head)(q_bkgth, k_bksh, v_bksh, seg_bt)
    out = out_bkgth.transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)
    return out.astype(v_btkh.dtype)
