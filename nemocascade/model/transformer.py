"""The decoder: embedding, scanned blocks, final norm; hidden states out.

Used functionally: `Transformer(cfg).apply({"params": params}, tokens, ...)`.
The forward returns hidden states `[B, T, D]`; logits are formed only inside the
fused log-prob kernel (`nemocascade/kernels/fused_logprob`) from `unembedding(params, cfg)`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nemocascade.model import kv_cache, layers, presets

Cache = kv_cache.Cache

_REMAT = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
# The residual stream: its length is split over 'tensor' under sequence parallelism.
_RES = ("act_batch", "act_res_len", "act_embed")


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)); x + mlp(norm(x))."""

    cfg: presets.ModelConfig
    per_row_cache: bool = False

    @nn.compact
    def __call__(self, carry, layer, positions_bt, q_slot_bt, q_seg_bt):
        x_btd, cache = carry
        cfg = self.cfg
        norm = functools.partial(layers.RMSNorm, cfg.rms_eps, cfg.dtype, cfg.param_dtype)
        # The norms' outputs are pinned to the residual layout, so that under
        # sequence parallelism the sequence is all-gathered in the compute
        # dtype (not as the norm's float32) and the projections' outputs are
        # reduce-scattered back to it.
        x_norm = layers.constrain(norm(name="attn_norm")(x_btd), _RES)
        h, cache = layers.Attention(cfg, self.per_row_cache, name="attn")(
            x_norm, positions_bt, q_slot_bt, q_seg_bt, cache, layer
        )
        x_btd = layers.constrain(x_btd + layers.constrain(h, _RES), _RES)
        x_norm = layers.constrain(norm(name="mlp_norm")(x_btd), _RES)
        h = layers.constrain(layers.MLP(cfg, name="mlp")(x_norm), _RES)
        return (layers.constrain(x_btd + h, _RES), cache), None


class Transformer(nn.Module):
    """Decoder-only transformer (Qwen3 / Llama family).

    Args (call):
      tokens_bt: int token ids.
      positions_bt: RoPE positions (restart at 0 per packed segment).
      segment_ids_bt: 1.. per sequence, 0 for padding; attention stays within a segment.
      cache: optional KV cache (see `init_cache`); tokens are written at slots
        `cache_index .. cache_index+T-1` and attend to everything written before.
      cache_index: slot of the first token when decoding with a cache: a
        scalar (every row writes the same slots) or int32 [B], one per row
        (continuous batching: rows at different completion lengths).

    Returns:
      (hidden_btd after the final norm, updated cache or None).
    """

    cfg: presets.ModelConfig

    @nn.compact
    def __call__(self, tokens_bt, positions_bt, segment_ids_bt=None, cache=None, cache_index=0):
        cfg = self.cfg
        b, t = tokens_bt.shape
        if segment_ids_bt is None:
            segment_ids_bt = jnp.ones((b, t), jnp.int32)
        per_row = jnp.ndim(cache_index) == 1
        q_slot_bt = jnp.broadcast_to(
            jnp.reshape(jnp.asarray(cache_index, jnp.int32), (-1, 1))
            + jnp.arange(t, dtype=jnp.int32),
            (b, t),
        )
        embed = nn.Embed(
            cfg.vocab_size,
            cfg.d_model,
            dtype=layers.dtype_of(cfg.dtype),
            param_dtype=layers.dtype_of(cfg.param_dtype),
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(stddev=0.02), ("vocab", "embed")
            ),
            name="embed",
        )
        x_btd = layers.constrain(embed(tokens_bt), _RES)

        block = Block
        if cfg.remat_policy != "none":
            block = nn.remat(
                Block, policy=_REMAT[cfg.remat_policy], prevent_cse=not cfg.scan_layers
            )
        args = (positions_bt, q_slot_bt, segment_ids_bt)
        if cfg.scan_layers:
            # The whole [L, ...] cache rides in the carry: each layer writes only
            # its new slots, so a decode step never copies the cache.
            carry = (x_btd, {} if cache is None else cache)
            stack = nn.scan(
                block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
                length=cfg.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )(cfg, per_row, name="layers")
            (x_btd, new_cache), _ = stack(carry, jnp.arange(cfg.num_layers, dtype=jnp.int32), *args)
        else:
            # Each layer reads and writes its own cache arrays (`kv_cache` layout).
            new_layers = []
            for i in range(cfg.num_layers):
                layer_cache = {} if cache is None else kv_cache.layer_cache(cache, i)
                (x_btd, layer_cache), _ = block(cfg, per_row, name=f"layer_{i}")(
                    (x_btd, layer_cache), None, *args
                )
                new_layers.append(layer_cache)
            new_cache = tuple(new_layers) if cache is not None else None
        new_cache = new_cache or None
        hidden = layers.RMSNorm(cfg.rms_eps, cfg.dtype, cfg.param_dtype, name="final_norm")(x_btd)
        if not cfg.tie_embeddings:
            # Declared here so the parameter exists; applied by the fused kernel.
            self.param(
                "lm_head",
                nn.with_logical_partitioning(
                    nn.initializers.normal(stddev=0.02), ("embed", "vocab")
                ),
                (cfg.d_model, cfg.vocab_size),
                layers.dtype_of(cfg.param_dtype),
            )
        return hidden, new_cache


def unembedding(params: Any, cfg: presets.ModelConfig) -> jax.Array:
    """The [D, V] unembedding matrix from a params pytree (tied or not)."""
    if cfg.tie_embeddings:
        return params["embed"]["embedding"].T
    return params["lm_head"]


def init_cache(cfg: presets.ModelConfig, batch: int, max_len: int, dtype=None) -> Cache:
    """An empty KV cache (`kv_cache` layout): every slot is padding until written."""
    return kv_cache.init(cfg, batch, max_len, dtype or layers.dtype_of(cfg.dtype))


def init_params(cfg: presets.ModelConfig, rng: jax.Array, seq_len: int = 8):
    """Boxed (logically partitioned) params; unbox with `nn.meta.unbox`.

    The values do not depend on `cfg.scan_layers`: unrolled layers get the
    slices of the scanned init, so both layouts start from the same weights.
    """
    tokens = jnp.zeros((1, seq_len), jnp.int32)
    positions = jnp.arange(seq_len, dtype=jnp.int32)[None]

    def init(c):
        return Transformer(c).init(rng, tokens, positions)["params"]

    if cfg.scan_layers:
        return init(cfg)
    boxed = init(cfg)  # unrolled boxes (per-layer logical axes); values replaced below
    values = dict(nn.meta.unbox(init(dataclasses.replace(cfg, scan_layers=True))))
    stacked = values.pop("layers")
    for i in range(cfg.num_layers):
        values[f"layer_{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)

    def fill(box, value):
        return box.replace_boxed(value) if isinstance(box, nn.meta.AxisMetadata) else value

    return jax.tree.map(fill, boxed, values, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
