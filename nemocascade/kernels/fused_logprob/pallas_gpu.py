"""Triton-style GPU Pallas forward: split-vocabulary partials, merged in XLA.

GPU grid programs run in parallel with no ordering, so the TPU pattern of
accumulating across a sequential vocabulary grid axis is invalid here. Instead
the vocabulary is split into `vocab_split`-column pieces; program
`(token block i, split j)` loops over its split in `block_vocab` steps, merging
online-softmax statistics in registers, and writes the partial
`(m, s, t, target)` to row `j` of `[num_splits, N]` outputs;
`online_softmax.merge_all` combines the partials in XLA (flash-decoding /
split-K style).

Each `[block_tokens, block_vocab]` logits tile is accumulated over the hidden
dimension in `block_d` steps (a power of two dividing `D`) so every loaded
array has a power-of-two size, as the Triton lowering requires; `block_tokens`
and `block_vocab` must be powers of two ≥ 16.
Loads and stores are masked at the ragged token/vocabulary edges because the
Triton lowering does not bounds-check blocks. The backend is chosen by the
compiler params: `pltriton.CompilerParams` forces Triton (JAX ≥ 0.9 defaults
to Mosaic GPU otherwise; the Triton backend is deprecated from JAX 0.11).

The backward pass is `chunked_xla.backward` (XLA recompute), via `api.py`.

Hardware status: lowered by Triton and run on one H200 (JAX 0.11.2): it
matches `chunked_xla`, and with 128 × 128 tiles its forward takes 0.90× and
forward + backward 0.97× of chunked XLA's time at 16384 × 4096 × 151936 bf16
(`bench/gpu_device_check.sh`, docs/kernels.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from nemocascade.kernels.fused_logprob import online_softmax

DEFAULT_BLOCK_TOKENS = 128
DEFAULT_BLOCK_VOCAB = 128
DEFAULT_BLOCK_D = 64
# Columns per program: V / 4096 partials per token (≈ 600 B/token at V = 151,936)
# instead of one per 128-column block.
DEFAULT_VOCAB_SPLIT = 4096


def _kernel(
    num_valid_ref,
    h_ref,
    w_ref,
    y_ref,
    m_out,
    s_out,
    t_out,
    target_out,
    *,
    n: int,
    v: int,
    block_vocab: int,
    block_d: int,
    temperature: float,
):
    block_tokens, d = h_ref.shape
    split = w_ref.shape[1]
    rows = pl.program_id(0) * block_tokens + jnp.arange(block_tokens)
    row_ok = rows < n
    y = pltriton.load(y_ref, mask=row_ok, other=-1)
    num_valid = num_valid_ref[()]
    # program_id is read here, not in the loop body (interpret mode needs that).
    split_start = pl.program_id(1) * split

    def vocab_step(b, acc):
        cols = split_start + b * block_vocab + jnp.arange(block_vocab)
        col_ok = cols < v
        vb = pl.ds(pl.multiple_of(b * block_vocab, block_vocab), block_vocab)

        def d_step(k, z):
            dk = pl.ds(pl.multiple_of(k * block_d, block_d), block_d)
            h = pltriton.load(h_ref.at[:, dk], mask=row_ok[:, None], other=0)
            w = pltriton.load(w_ref.at[dk, vb], mask=col_ok[None, :], other=0)
            return z + jnp.dot(h, w, preferred_element_type=jnp.float32)

        z = lax.fori_loop(
            0, d // block_d, d_step, jnp.zeros((block_tokens, block_vocab), jnp.float32)
        )
        # num_valid ≤ V, so this also masks columns past the end of the vocabulary.
        tile = online_softmax.tile_partial(
            z / temperature, (cols < num_valid)[None, :], cols[None, :] == y[:, None]
        )
        return online_softmax.merge(acc, tile)

    acc = lax.fori_loop(
        0, split // block_vocab, vocab_step, online_softmax.empty((block_tokens, 1))
    )
    for out, value in zip((m_out, s_out, t_out, target_out), acc, strict=True):
        pltriton.store(out, value[:, 0], mask=row_ok)


def _pow2_divisor(d: int, cap: int) -> int:
    """Largest power of two ≤ cap dividing d."""
    b = 1
    while b * 2 <= cap and d % (b * 2) == 0:
        b *= 2
    return b


def partial_stats(
    hidden_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    num_valid: int | jax.Array,
    *,
    temperature: float = 1.0,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    block_vocab: int = DEFAULT_BLOCK_VOCAB,
    block_d: int = DEFAULT_BLOCK_D,
    vocab_split: int = DEFAULT_VOCAB_SPLIT,
    num_warps: int = 4,
    num_stages: int = 2,
    interpret: bool = False,
) -> online_softmax.Partial:
    """Online-softmax statistics over all columns of `w_dv`, each `[N]` float32.

    Columns `≥ num_valid` (static or traced) are excluded; targets are column ids.
    """
    n, d = hidden_nd.shape
    v = w_dv.shape[1]
    for name, b in (("block_tokens", block_tokens), ("block_vocab", block_vocab)):
        if b < 16 or b & (b - 1):
            raise ValueError(f"pallas_gpu needs {name} a power of two ≥ 16, got {b}.")
    block_d = _pow2_divisor(d, block_d)
    if block_d < 16:
        raise ValueError(f"pallas_gpu needs D divisible by 16, got D={d}.")
    # Powers of two no larger than needed keep tiny inputs to one block.
    block_tokens = min(block_tokens, max(16, pl.next_power_of_2(n)))
    block_vocab = min(block_vocab, max(16, pl.next_power_of_2(v)))
    # A whole number of blocks per split, and no more splits' worth than V needs.
    vocab_split = min(pl.cdiv(vocab_split, block_vocab), pl.cdiv(v, block_vocab)) * block_vocab
    num_splits = pl.cdiv(v, vocab_split)
    stat_spec = pl.BlockSpec((None, block_tokens), lambda i, j: (j, i))
    stats = pl.pallas_call(
        functools.partial(
            _kernel, n=n, v=v, block_vocab=block_vocab, block_d=block_d, temperature=temperature
        ),
        out_shape=[jax.ShapeDtypeStruct((num_splits, n), jnp.float32)] * 4,
        grid=(pl.cdiv(n, block_tokens), num_splits),
        in_specs=[
            pl.BlockSpec((), lambda i, j: ()),
            pl.BlockSpec((block_tokens, d), lambda i, j: (i, 0)),
            pl.BlockSpec((d, vocab_split), lambda i, j: (0, j)),
            pl.BlockSpec((block_tokens,), lambda i, j: (i,)),
        ],
        out_specs=[stat_spec] * 4,
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="fused_logprob_gpu",
    )(jnp.asarray(num_valid, jnp.int32), hidden_nd, w_dv, targets_n.astype(jnp.int32))
    return online_softmax.merge_all(online_softmax.Partial(*stats), axis=0)
