"""One attention function, implementations chosen by name (`model.attention_impl`).

    out_btnh = api.attention(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt,
                             k_slot_bs, k_seg_bs, implementation="chunked_xla")

Mask rule (every implementation): query at slot i sees key at slot j iff
j <= i, both lie in the same segment and the key segment is not 0 (padding).
GQA: `N` query heads share `K` kv heads in groups of `N/K`.

| name | what | memory | where |
|---|---|---|---|
| `xla` | `reference.attention`, materialized scores (the oracle) | O(T·S) | everywhere |
| `blocked_xla` | causal query blocks, hand-written backward | O(T·S) | everywhere |
| `chunked_xla` | reference per query block under remat | O(block·S) | everywhere |
| `dot_product` | `jax.nn.dot_product_attention` (cuDNN on GPU) | backend's | everywhere |
| `splash` | Pallas TPU splash attention | O(block²) | TPU; CPU interpret |
| `pallas_gpu` | Pallas GPU flash attention (Triton) | O(block·H) | GPU; CPU interpret |

The Pallas kernels only do self-attention of packed sequences (keys are the
queries' own tokens, `self_attention=True`) at lengths their tiles divide;
any other call (KV-cache prefill/decode, ragged lengths) falls back to
`chunked_xla`, which is exact. Under a multi-device mesh the Pallas kernels run
inside `jax.shard_map` (`sharded.py`); the XLA implementations are partitioned
by XLA. `""` picks by `jax.default_backend()`: cpu → `blocked_xla` (the
fastest there at the tiny models' lengths), tpu → `splash`, gpu →
`chunked_xla` (until the Pallas GPU kernel has run on hardware, see
docs/kernels.md).
"""

from __future__ import annotations

import jax

from nemocascade.kernels.attention import (
    blocked_xla,
    chunked_xla,
    dot_product,
    pallas_gpu,
    pallas_tpu,
    reference,
    sharded,
)

IMPLEMENTATIONS = ("xla", "blocked_xla", "chunked_xla", "dot_product", "splash", "pallas_gpu")
_DEFAULT_BY_BACKEND = {"cpu": "blocked_xla", "tpu": "splash", "gpu": "chunked_xla"}
_PALLAS = {"splash": pallas_tpu, "pallas_gpu": pallas_gpu}


def resolve(implementation: str) -> str:
    """The implementation a name selects ("" → by backend); ValueError if unknown."""
    name = implementation or _DEFAULT_BY_BACKEND.get(jax.default_backend(), "chunked_xla")
    if name not in IMPLEMENTATIONS:
        raise ValueError(
            f"model.attention_impl={implementation!r} is unknown; choose from "
            f"{IMPLEMENTATIONS} or '' (by platform)"
        )
    return name


def attention(
    q_btnh,
    k_bskh,
    v_bskh,
    q_slot_bt,
    q_seg_bt,
    k_slot_bs,
    k_seg_bs,
    *,
    implementation: str = "",
    self_attention: bool = False,
    interpret: bool | None = None,
    block: int | None = None,
    mesh_axes: sharded.MeshAxes | None = None,
) -> jax.Array:
    """Masked GQA attention `[B, T, N, H]` in `v`'s dtype.

    Args:
      q_btnh, k_bskh, v_bskh: queries, keys, values (N a multiple of K).
      q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs: int32 slots and segments.
      implementation: one of `IMPLEMENTATIONS`, "" by backend.
      self_attention: keys/values are the queries' own tokens in order
        (training forward); required by the Pallas kernels.
      interpret: Pallas interpret mode; None = on when the backend is CPU.
      block: query block (`chunked_xla`, `blocked_xla`) or tile (Pallas) size;
        None = default.
      mesh_axes: mesh axes of batch and heads for the Pallas kernels'
        `shard_map` (None: call the kernel directly).
    """
    name = resolve(implementation)
    args = (q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    if name == "xla":
        return reference.attention(*args)
    if name == "blocked_xla":
        return blocked_xla.attention(
            *args, self_attention=self_attention, block_q=block or blocked_xla.DEFAULT_BLOCK_Q
        )
    if name == "dot_product":
        return dot_product.attention(*args)
    if name in _PALLAS:
        module = _PALLAS[name]
        t, s = q_btnh.shape[1], k_bskh.shape[1]
        tile = block or module.DEFAULT_BLOCK
        if self_attention and module.supports(t, s, tile):
            interp = jax.default_backend() == "cpu" if interpret is None else interpret

            def kernel(q, k, v, seg):
                return module.attention(q, k, v, seg, block=tile, interpret=interp)

            if mesh_axes is None:
                return kernel(q_btnh, k_bskh, v_bskh, q_seg_bt)
            out = sharded.attention(kernel, q_btnh, k_bskh, v_bskh, q_seg_bt, mesh_axes)
            if out is not None:
                return out
        block = None  # the Pallas tile is no query block
    return chunked_xla.attention(*args, block_q=block or chunked_xla.DEFAULT_BLOCK_Q)
