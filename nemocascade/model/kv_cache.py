"""The KV cache: its layout, and the only code that writes, reads or copies it.

Per layer, keys and values are heads-major `[B, K, S, H]` and the segment ids
`[B, S]` (0 = an unwritten or padding slot). The score and value dots of a
decode step contract over `H` and `S` with `B, K` as batch dimensions, so this
layout feeds them without a transposed copy of the cache.

How the layers are held follows `cfg.scan_layers`:

* scanned: one dict `{"k", "v": [L, B, K, S, H], "seg": [L, B, S]}`, carried
  whole through the layer scan; a layer writes its slots at its (traced) index;
* unrolled: a tuple of L per-layer dicts, each layer reading and writing its
  own arrays (no layer slice is copied out of a stacked array).

Writes happen in place when the cache is donated (the samplers donate it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from nemocascade.model import presets

# {"k", "v": [(L,) B, K, S, H], "seg": [(L,) B, S]}, or a tuple of per-layer dicts.
Cache = dict[str, jax.Array] | tuple[dict[str, jax.Array], ...]

_AXES = {
    "k": ("cache_batch", "cache_kv_heads", "cache_len", None),
    "v": ("cache_batch", "cache_kv_heads", "cache_len", None),
    "seg": ("cache_batch", "cache_len"),
}


def init(cfg: presets.ModelConfig, batch: int, max_len: int, dtype) -> Cache:
    """An empty cache: every slot is padding (segment 0) until written."""
    kv = (batch, cfg.num_kv_heads, max_len, cfg.head_dim)

    def layer(lead: tuple[int, ...]):
        return {
            "k": jnp.zeros(lead + kv, dtype),
            "v": jnp.zeros(lead + kv, dtype),
            "seg": jnp.zeros(lead + (batch, max_len), jnp.int32),
        }

    if cfg.scan_layers:
        return layer((cfg.num_layers,))
    return tuple(layer(()) for _ in range(cfg.num_layers))


def map_with_axes(fn: Callable[[Any, tuple], Any], cache) -> Any:
    """`fn(leaf, logical_axes)` over every array of a cache (or of its abstract shapes)."""
    if isinstance(cache, dict):
        return {name: fn(leaf, ("layers", *_AXES[name])) for name, leaf in cache.items()}
    return tuple({name: fn(leaf, _AXES[name]) for name, leaf in c.items()} for c in cache)


def layer_cache(cache: Cache, i: int):
    """What layer `i` of an unrolled model reads and writes (the stacked dict when scanned)."""
    return cache if isinstance(cache, dict) else cache[i]


def _lead(layer) -> tuple:
    return () if layer is None else (layer,)


def write(cache, layer, k_btkh, v_btkh, seg_bt, q_slot_bt, *, per_row: bool):
    """Writes this step's keys, values and segments at their slots `q_slot_bt`.

    `cache` is one layer's dict (`layer=None`) or the stacked dict with the
    traced `layer` index. `per_row`: rows write different slots (a scatter);
    otherwise every row writes slots `q_slot_bt[0, 0] ..` (a slice update).
    """
    lead = _lead(layer)
    if per_row:
        rows_bt = jnp.broadcast_to(jnp.arange(q_slot_bt.shape[0])[:, None], q_slot_bt.shape)
        # Advanced indices split by a slice put their [B, T] dims first: the
        # update is [B, T, K, H] for k/v, [B, T] for seg.
        kv_index = (*lead, rows_bt, slice(None), q_slot_bt)
        return {
            "k": cache["k"].at[kv_index].set(k_btkh.astype(cache["k"].dtype)),
            "v": cache["v"].at[kv_index].set(v_btkh.astype(cache["v"].dtype)),
            "seg": cache["seg"].at[(*lead, rows_bt, q_slot_bt)].set(seg_bt),
        }
    start = q_slot_bt[0, 0]
    zero = jnp.zeros((), jnp.int32)

    def put(buf, new, index):
        if layer is not None:
            new, index = new[None], (layer, *index)
        return jax.lax.dynamic_update_slice(buf, new.astype(buf.dtype), index)

    kv_index = (zero, zero, start, zero)
    return {
        "k": put(cache["k"], jnp.swapaxes(k_btkh, 1, 2), kv_index),
        "v": put(cache["v"], jnp.swapaxes(v_btkh, 1, 2), kv_index),
        "seg": put(cache["seg"], seg_bt, (zero, start)),
    }


def read(cache, layer, size: int):
    """The first `size` slots of a layer: `(k_bksh, v_bksh, seg_bs)` (see `write` for `layer`)."""
    if layer is None:
        return cache["k"][:, :, :size], cache["v"][:, :, :size], cache["seg"][:, :size]
    zero = jnp.zeros((), jnp.int32)
    _, b, k, _, h = cache["k"].shape
    kv_start, kv_shape = (layer, zero, zero, zero, zero), (1, b, k, size, h)
    return (
        jax.lax.dynamic_slice(cache["k"], kv_start, kv_shape)[0],
        jax.lax.dynamic_slice(cache["v"], kv_start, kv_shape)[0],
        jax.lax.dynamic_slice(cache["seg"], kv_start[:3], (1, b, size))[0],
    )


def length(cache: Cache) -> int:
    """Slots per row."""
    return layer_cache(cache, 0)["seg"].shape[-1]


def copy_rows(dst: Cache, dst_rows, src: Cache, src_rows, p: int) -> Cache:
    """`dst`'s rows `dst_rows`, slots `[0, p)`, get `src`'s rows `src_rows` (a `p`-slot cache).

    Out-of-range `dst_rows` entries are dropped (padding of a fixed-size index).
    """

    def one(d, s, stacked: bool):
        lead = (slice(None),) if stacked else ()
        out = {}
        for name in d:
            mid = (slice(None),) if name != "seg" else ()
            index = (*lead, dst_rows, *mid, slice(None, p))
            out[name] = d[name].at[index].set(s[name][(*lead, src_rows)], mode="drop")
        return out

    if isinstance(dst, dict):
        return one(dst, src, True)
    return tuple(one(d, s, False) for d, s in zip(dst, src, strict=True))
