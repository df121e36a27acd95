"""The KV cache layout: writes, reads and row copies agree between stacked and per-layer caches."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.model import kv_cache, presets

CFG = presets.ModelConfig(
    vocab_size=32, d_model=16, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8, d_ff=32
)
B, S, T = 3, 10, 2


def _step(rng):
    k = rng.normal(size=(B, T, CFG.num_kv_heads, CFG.head_dim)).astype(np.float32)
    v = rng.normal(size=(B, T, CFG.num_kv_heads, CFG.head_dim)).astype(np.float32)
    return jnp.asarray(k), jnp.asarray(v)


def _layers(cache):
    """Per-layer numpy dicts of either layout."""
    if isinstance(cache, dict):
        return [{n: np.asarray(a[i]) for n, a in cache.items()} for i in range(CFG.num_layers)]
    return [{n: np.asarray(a) for n, a in c.items()} for c in cache]


def _write_all(cache, per_row, slots_bt, rng):
    seg = jnp.ones((B, T), jnp.int32)
    out = []
    for i in range(CFG.num_layers):
        k, v = _step(rng)
        if isinstance(cache, dict):
            cache = kv_cache.write(cache, jnp.int32(i), k, v, seg, slots_bt, per_row=per_row)
        else:
            layer = kv_cache.write(cache[i], None, k, v, seg, slots_bt, per_row=per_row)
            cache = cache[:i] + (layer,) + cache[i + 1 :]
        out.append((np.asarray(k), np.asarray(v)))
    return cache, out


@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("scan", [True, False])
def test_write_puts_keys_at_their_slots_heads_major(scan, per_row):
    cfg = dataclasses.replace(CFG, scan_layers=scan)
    cache = kv_cache.init(cfg, B, S, jnp.float32)
    assert isinstance(cache, dict) == scan
    if per_row:
        slots_bt = jnp.asarray([[0, 1], [4, 5], [7, 8]], jnp.int32)
    else:
        slots_bt = jnp.broadcast_to(jnp.arange(3, 3 + T, dtype=jnp.int32), (B, T))
    cache, written = _write_all(cache, per_row, slots_bt, np.random.default_rng(0))
    slots = np.asarray(slots_bt)
    for i, layer in enumerate(_layers(cache)):
        k, v = written[i]
        assert layer["k"].shape == (B, CFG.num_kv_heads, S, CFG.head_dim)
        for b in range(B):
            np.testing.assert_array_equal(layer["k"][b][:, slots[b]], k[b].transpose(1, 0, 2))
            np.testing.assert_array_equal(layer["v"][b][:, slots[b]], v[b].transpose(1, 0, 2))
            expected_seg = np.zeros(S, np.int32)
            expected_seg[slots[b]] = 1
            np.testing.assert_array_equal(layer["seg"][b], expected_seg)
        # `read` returns the same prefix through either layout.
        layer_arg = jnp.int32(i) if scan else None
        read = kv_cache.read(kv_cache.layer_cache(cache, i), layer_arg, 6)
        for got, name in zip(read, ("k", "v", "seg"), strict=True):
            want = layer[name][:, :, :6] if name != "seg" else layer[name][:, :6]
            np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("scan", [True, False])
def test_copy_rows_installs_prefilled_rows(scan):
    cfg = dataclasses.replace(CFG, scan_layers=scan)
    p = 4
    rng = np.random.default_rng(1)
    src = kv_cache.init(cfg, B, p, jnp.float32)
    src, _ = _write_all(src, False, jnp.zeros((B, T), jnp.int32), rng)  # slots 0, 1 written
    dst = kv_cache.init(cfg, 5, S, jnp.float32)
    # Slots 4 and 1 get source rows 2 and 0; the out-of-range index 5 is dropped.
    out = kv_cache.copy_rows(dst, jnp.asarray([4, 1, 5]), src, jnp.asarray([2, 0, 1]), p)
    for got, want in zip(_layers(out), _layers(src), strict=True):
        for name in ("k", "v", "seg"):
            slot_axis = 2 if name != "seg" else 1
            prefix = np.take(got[name], range(p), slot_axis)  # [rows, ...] first p slots
            np.testing.assert_array_equal(prefix[4], want[name][2])
            np.testing.assert_array_equal(prefix[1], want[name][0])
            assert not prefix[[0, 2, 3]].any()
            assert not np.take(got[name], range(p, S), slot_axis).any()
