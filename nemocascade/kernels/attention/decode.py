"""Attention over a KV cache that reads only the filled prefix, in length buckets.

A step's queries sit at slots below `filled = cache_index + T`; slots at or
past `filled` hold padding (segment 0) that the mask removes anyway, but
reading them costs memory bandwidth in proportion to the cache size at every
decode step. The cache length `S` is cut into buckets `S, ⌈S/2⌉, ⌈S/4⌉, …`
(rounded up to a multiple of 128, down to `min_bucket`), and `lax.switch` on
the smallest bucket holding `filled` runs attention over that static prefix
only: a 40K-token rollout in a 49K cache reads 1/2^k of it while it is short
and the whole cache only at the end. All buckets are branches of one
program, so a growing rollout never recompiles.

Values equal attention over the whole cache up to float32 summation order
(the skipped slots have weight exactly 0; measured differences ~2e-7).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

# Caches up to 1024 slots (the tiny and small presets' max_seq_len) keep one bucket, so
# their decode numerics are exactly those of whole-cache attention.
MIN_BUCKET = 1024
_ALIGN = 128


def bucket_sizes(s: int, min_bucket: int = MIN_BUCKET) -> tuple[int, ...]:
    """Ascending static prefix lengths, the last one `s`."""
    sizes = [s]
    while True:
        half = -(-sizes[-1] // 2)
        half = -(-half // _ALIGN) * _ALIGN
        if half < min_bucket or half >= sizes[-1]:
            return tuple(reversed(sizes))
        sizes.append(half)


def attention(
    attend: Callable[..., jax.Array],
    q_btnh,
    q_slot_bt,
    q_seg_bt,
    cache: dict[str, jax.Array],
    layer,
    filled,
    *,
    min_bucket: int = MIN_BUCKET,
) -> jax.Array:
    """`attend(q, k, v, q_slot, q_seg, k_slot, k_seg)` over the smallest filled-prefix bucket.

    Args:
      attend: the attention implementation (e.g. a partial of `api.attention`).
      cache: `{"k", "v": [L, B, S, K, H], "seg": [L, B, S]}`, this step's tokens written.
      layer: traced layer index into the cache.
      filled: traced scalar, number of cache slots written so far (incl. this step's).
    """
    _, b, s, k, h = cache["k"].shape
    sizes = bucket_sizes(s, min_bucket)
    zero = jnp.zeros((), jnp.int32)

    def branch(size):
        # The slice is taken inside the branch, so only `size` slots are read.
        def run(q, q_slot, q_seg, cache_k, cache_v, cache_seg, layer):
            start = (layer, zero, zero, zero, zero)
            k_bskh = jax.lax.dynamic_slice(cache_k, start, (1, b, size, k, h))[0]
            v_bskh = jax.lax.dynamic_slice(cache_v, start, (1, b, size, k, h))[0]
            k_seg_bs = jax.lax.dynamic_slice(cache_seg, start[:3], (1, b, size))[0]
            k_slot_bs = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (b, size))
            return attend(q, k_bskh, v_bskh, q_slot, q_seg, k_slot_bs, k_seg_bs)

        return run

    operands = (q_btnh, q_slot_bt, q_seg_bt, cache["k"], cache["v"], cache["seg"], layer)
    if len(sizes) == 1:
        return branch(s)(*operands)
    index = sum((filled > size).astype(jnp.int32) for size in sizes[:-1])
    return jax.lax.switch(index, [branch(size) for size in sizes], *operands)
