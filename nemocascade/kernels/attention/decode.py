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

from nemocascade.kernels.attention import reference

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
    read: Callable[[int], tuple[jax.Array, jax.Array, jax.Array]],
    cache_len: int,
    filled,
    *,
    min_bucket: int = MIN_BUCKET,
) -> jax.Array:
    """Attention of this step's queries over the smallest filled-prefix bucket of a layer's cache.

    Args:
      attend: the attention implementation, `attend(q, k_bskh, v_bskh, q_slot,
        q_seg, k_slot, k_seg)` (e.g. a partial of `api.attention`); used for
        multi-token calls (prefill). One-token decode steps run
        `reference.attention_heads_major` on the cache's own layout.
      read: `read(size) -> (k_bksh, v_bksh, seg_bs)`, the layer's first `size`
        cache slots (this step's tokens written).
      cache_len: slots per row of the cache.
      filled: traced scalar, number of cache slots written so far (incl. this step's).
    """
    b, t = q_slot_bt.shape
    sizes = bucket_sizes(cache_len, min_bucket)

    def branch(size):
        # The slice is taken inside the branch, so only `size` slots are read.
        def run():
            k_bksh, v_bksh, k_seg_bs = read(size)
            k_slot_bs = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (b, size))
            if t == 1:
                return reference.attention_heads_major(
                    q_btnh, k_bksh, v_bksh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs
                )
            k_bskh, v_bskh = jnp.swapaxes(k_bksh, 1, 2), jnp.swapaxes(v_bksh, 1, 2)
            return attend(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)

        return run

    if len(sizes) == 1:
        return branch(cache_len)()
    index = sum((filled > size).astype(jnp.int32) for size in sizes[:-1])
    return jax.lax.switch(index, [branch(size) for size in sizes])
