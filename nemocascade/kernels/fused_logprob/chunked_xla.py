"""Chunked pure-XLA fused log-prob: never holds more than one `[tokens, vocab]` tile.

Forward: `lax.scan` over token chunks; inside, a `lax.fori_loop` over vocabulary
chunks merges online-softmax statistics (`online_softmax`). Only per-token
float32 statistics survive (they are the custom-VJP residuals, see `api.py`).

Backward (`backward`, also used by the Pallas paths and by `sharded.py`):
recomputes each logits tile. The outer loop runs over vocabulary chunks and
writes each finished float32 `dW` chunk into the `[D, V]` result; the inner loop
runs over token chunks, accumulating that `dW` chunk and adding `dh` rows into
a float32 `[N, D]` buffer. Tile matmuls take the input dtype with
`preferred_element_type=float32`; `dlogits` is cast to the input dtype before
the two backward matmuls (bf16 GEMMs for bf16 models). The target column is
picked by an iota compare (no scatter/gather on `[N, V]`).

A vocabulary not divisible by the chunk is handled without padding `w`: the last
chunk is slid back to end at `V` and its columns already covered by the
previous chunk are masked out. Token padding copies `hidden` only when `N` is
not a multiple of the token chunk.

`num_valid` (traced or static) masks columns `≥ num_valid`; targets are local
column ids. Callers shift both for a vocabulary shard (see `sharded.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from nemocascade.kernels.fused_logprob import online_softmax

# A 1024 × 4096 float32 logits tile is 16 MiB: GEMMs large enough to run near
# peak, few live tiles. It was the fastest of the shapes tried on the CPU bench
# (bench/fused_logprob.py); accelerators may prefer other sizes.
DEFAULT_TOKEN_BLOCK = 1024
DEFAULT_VOCAB_BLOCK = 4096


def _chunking(n: int, v: int, token_block: int, vocab_block: int) -> tuple[int, int, int, int]:
    tc = min(token_block, n)
    vc = min(vocab_block, v)
    return tc, -(-n // tc), vc, -(-v // vc)


def _vocab_start(j: jax.Array, vc: int, v: int) -> jax.Array:
    # The last chunk slides back so every slice stays in bounds.
    return jnp.minimum(j * vc, v - vc)


def _column_masks(start, j, vc, num_valid, targets_c):
    """(valid [1, vc], is_target [rows, vc]) for the chunk starting at column `start`."""
    cols = start + lax.broadcasted_iota(jnp.int32, (1, vc), 1)
    # Columns below j * vc were already covered by the previous chunk.
    valid = (cols >= j * vc) & (cols < num_valid)
    return valid, cols == targets_c[:, None]


def _pad_rows(x: jax.Array, rows: int) -> jax.Array:
    if x.shape[0] == rows:
        return x
    return jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1))


def _logits(h_c, w_c, temperature):
    return jnp.dot(h_c, w_c, preferred_element_type=jnp.float32) / temperature


def partial_stats(
    hidden_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    num_valid: int | jax.Array,
    *,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> online_softmax.Partial:
    """Online-softmax statistics over all columns of `w_dv`, each `[N]` float32."""
    n, d = hidden_nd.shape
    v = w_dv.shape[1]
    tc, nc, vc, nv = _chunking(
        n, v, token_block or DEFAULT_TOKEN_BLOCK, vocab_block or DEFAULT_VOCAB_BLOCK
    )
    h_ctd = _pad_rows(hidden_nd, nc * tc).reshape(nc, tc, d)
    y_ct = _pad_rows(targets_n.astype(jnp.int32), nc * tc).reshape(nc, tc)

    def token_chunk(_, xs):
        h_c, y_c = xs

        def vocab_chunk(j, acc):
            start = _vocab_start(j, vc, v)
            z = _logits(h_c, lax.dynamic_slice_in_dim(w_dv, start, vc, axis=1), temperature)
            valid, is_target = _column_masks(start, j, vc, num_valid, y_c)
            return online_softmax.merge(acc, online_softmax.tile_partial(z, valid, is_target))

        return None, lax.fori_loop(0, nv, vocab_chunk, online_softmax.empty((tc, 1)))

    _, p = lax.scan(token_chunk, None, (h_ctd, y_ct))
    return jax.tree.map(lambda x: x.reshape(nc * tc)[:n], p)


def backward(
    hidden_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    num_valid: int | jax.Array,
    lse_n: jax.Array,
    entropy_n: jax.Array | None,
    g_logp_n: jax.Array,
    g_entropy_n: jax.Array | None,
    *,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(dhidden [N, D] float32, dw [D, V] in w's dtype) by per-tile recomputation.

    `entropy_n`/`g_entropy_n` are None when entropy is not differentiated. `dw`
    is exact per vocabulary chunk; callers summing `dhidden` over vocabulary
    shards cast after the sum.
    """
    n, d = hidden_nd.shape
    v = w_dv.shape[1]
    tc, nc, vc, nv = _chunking(
        n, v, token_block or DEFAULT_TOKEN_BLOCK, vocab_block or DEFAULT_VOCAB_BLOCK
    )
    rows = nc * tc
    h_ctd = _pad_rows(hidden_nd, rows).reshape(nc, tc, d)
    # Padded rows get zero cotangents, so they contribute nothing.
    per_token = [targets_n.astype(jnp.int32), lse_n, g_logp_n]
    if g_entropy_n is not None:
        per_token += [entropy_n, g_entropy_n]
    per_token = [_pad_rows(x, rows).reshape(nc, tc) for x in per_token]

    def vocab_chunk(j, carry):
        dh_ctd, dw = carry
        start = _vocab_start(j, vc, v)
        w_c = lax.dynamic_slice_in_dim(w_dv, start, vc, axis=1)

        def token_chunk(i, inner):
            dh_ctd, dw_c = inner
            h_c = h_ctd[i]
            y_c, lse_c, g_c, *ent = (x[i][:, None] for x in per_token)
            ent_c, g_ent_c = ent if ent else (None, None)
            z = _logits(h_c, w_c, temperature)
            valid, is_target = _column_masks(start, j, vc, num_valid, y_c[:, 0])
            dz = online_softmax.dlogits(z, valid, is_target, lse_c, ent_c, g_c, g_ent_c)
            dz = (dz / temperature).astype(h_c.dtype)
            dh_c = lax.dot_general(
                dz, w_c, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
            )
            dw_c = dw_c + lax.dot_general(
                h_c, dz, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32
            )
            return dh_ctd.at[i].add(dh_c), dw_c

        dh_ctd, dw_c = lax.fori_loop(0, nc, token_chunk, (dh_ctd, jnp.zeros((d, vc), jnp.float32)))
        # Masked (already covered) columns of a slid-back chunk have dw_c = 0.
        dw = lax.dynamic_update_slice_in_dim(
            dw, lax.dynamic_slice_in_dim(dw, start, vc, axis=1) + dw_c.astype(dw.dtype), start, 1
        )
        return dh_ctd, dw

    dh_ctd, dw = lax.fori_loop(
        0,
        nv,
        vocab_chunk,
        (jnp.zeros((nc, tc, d), jnp.float32), jnp.zeros_like(w_dv)),
    )
    return dh_ctd.reshape(rows, d)[:n], dw
