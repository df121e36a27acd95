"""Mosaic TPU Pallas forward for the fused log-prob (backward: chunked XLA recompute).

Grid `(token blocks, vocab blocks)` with dimension semantics
`("parallel", "arbitrary")`: token blocks may be split across TensorCores, the
vocabulary axis runs sequentially per token block. Each step multiplies a
`[block_tokens, D]` hidden block by a `[D, block_vocab]` unembedding block on
the MXU (input dtype, float32 accumulation) and merges the tile's online-softmax
statistics (`online_softmax.tile_partial`/`merge`) into float32 VMEM scratch
accumulators (running max, exp-sum, entropy term, target logit). The last
vocabulary step writes the per-token statistics. The number of valid columns
arrives by scalar prefetch (SMEM), so the same compiled kernel serves padded
vocabularies and vocabulary shards (`sharded.py` passes a traced count).

Blocks: `block_tokens` a multiple of 8, `block_vocab` a multiple of 128
(8×128 vreg tiling); `D` is not tiled, so a hidden block and an unembedding
block must fit VMEM together (double-buffered). Edge blocks are not padded:
out-of-range columns are masked before the max, out-of-range token rows are
computed on garbage and dropped by the output write.

The backward pass is `chunked_xla.backward` (XLA recompute), via `api.py`.

Hardware status: this kernel has only been executed with `interpret=True` on
CPU, where it matches the reference. It has never been lowered or run on a TPU,
so its Mosaic lowering, VMEM budget and speed are unverified.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from nemocascade.kernels.fused_logprob import online_softmax

DEFAULT_BLOCK_TOKENS = 256
DEFAULT_BLOCK_VOCAB = 512
_MIN_VMEM_LIMIT = 32 * 1024 * 1024


def _kernel(
    num_valid_ref,
    h_ref,
    w_ref,
    y_ref,
    m_out,
    s_out,
    t_out,
    target_out,
    m_acc,
    s_acc,
    t_acc,
    target_acc,
    *,
    temperature: float,
):
    j = pl.program_id(1)
    accs = (m_acc, s_acc, t_acc, target_acc)

    @pl.when(j == 0)
    def _init():
        for ref, value in zip(accs, online_softmax.empty(m_acc.shape), strict=True):
            ref[...] = value

    z = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32) / temperature
    block_vocab = z.shape[1]
    cols = j * block_vocab + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    # num_valid ≤ V, so this also masks the out-of-range columns of the last block.
    tile = online_softmax.tile_partial(z, cols < num_valid_ref[0], cols == y_ref[...])
    acc = online_softmax.Partial(*(ref[...] for ref in accs))
    for ref, value in zip(accs, online_softmax.merge(acc, tile), strict=True):
        ref[...] = value

    @pl.when(j == pl.num_programs(1) - 1)
    def _write():
        for out, ref in zip((m_out, s_out, t_out, target_out), accs, strict=True):
            out[...] = ref[...]


def partial_stats(
    hidden_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    num_valid: int | jax.Array,
    *,
    temperature: float = 1.0,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    block_vocab: int = DEFAULT_BLOCK_VOCAB,
    interpret: bool = False,
) -> online_softmax.Partial:
    """Online-softmax statistics over all columns of `w_dv`, each `[N]` float32.

    Columns `≥ num_valid` (static or traced) are excluded; targets are column ids.
    """
    n, d = hidden_nd.shape
    v = w_dv.shape[1]
    if block_tokens % 8 or block_vocab % 128:
        raise ValueError(
            f"pallas_tpu needs block_tokens % 8 == 0 and block_vocab % 128 == 0, "
            f"got {block_tokens}, {block_vocab}."
        )
    # Blocks never exceed the (rounded-up) array, so small inputs stay one block.
    block_tokens = min(block_tokens, pl.cdiv(n, 8) * 8)
    block_vocab = min(block_vocab, pl.cdiv(v, 128) * 128)
    grid = (pl.cdiv(n, block_tokens), pl.cdiv(v, block_vocab))
    stat_spec = pl.BlockSpec((block_tokens, 1), lambda i, j, _: (i, 0))
    in_bytes = jnp.dtype(hidden_nd.dtype).itemsize * (block_tokens * d + d * block_vocab)
    # Double-buffered inputs plus a few float32 [tokens, vocab] temporaries.
    vmem_estimate = 2 * in_bytes + 6 * 4 * block_tokens * block_vocab
    stats = pl.pallas_call(
        functools.partial(_kernel, temperature=temperature),
        out_shape=[jax.ShapeDtypeStruct((n, 1), jnp.float32)] * 4,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=grid,
            in_specs=[
                pl.BlockSpec((block_tokens, d), lambda i, j, _: (i, 0)),
                pl.BlockSpec((d, block_vocab), lambda i, j, _: (0, j)),
                stat_spec,
            ],
            out_specs=[stat_spec] * 4,
            scratch_shapes=[pltpu.VMEM((block_tokens, 1), jnp.float32)] * 4,
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"),
            vmem_limit_bytes=max(_MIN_VMEM_LIMIT, 2 * vmem_estimate),
        ),
        interpret=interpret,
        name="fused_logprob_tpu",
    )(
        jnp.reshape(jnp.asarray(num_valid, jnp.int32), (1,)),
        hidden_nd,
        w_dv,
        targets_n.astype(jnp.int32).reshape(n, 1),
    )
    return online_softmax.Partial(*(x[:, 0] for x in stats))
