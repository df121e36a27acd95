"""Building blocks of the decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU.

Every parameter carries logical axis names (`nn.with_logical_partitioning`) and
every activation a logical constraint; `nemocascade/sharding/rules.py` maps the
names to mesh axes. Numerics follow Hugging Face Qwen3/Llama exactly (RMSNorm
in float32, rotate-half RoPE) so imported checkpoints give the same logits.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from nemocascade.kernels.attention import (
    api as attention_api,
    decode as attention_decode,
    sharded as attention_sharded,
)
from nemocascade.model import kv_cache, presets, rmsnorm, swiglu


def dtype_of(name: str):
    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def constrain(x, names: tuple[str | None, ...]):
    """Logical sharding constraint on an activation (no-op outside a mesh)."""
    return nn.with_logical_constraint(x, names)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) * scale, computed in float32."""

    eps: float
    dtype: str
    param_dtype: str
    axis_name: str = "norm"
    written_backward: bool = False  # `rmsnorm.rms_norm` (the q/k norms)

    @nn.compact
    def __call__(self, x):
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
            (x.shape[-1],),
            dtype_of(self.param_dtype),
        )
        if self.written_backward:
            return rmsnorm.rms_norm(x, scale, self.eps, dtype_of(self.dtype))
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * scale.astype(jnp.float32)).astype(dtype_of(self.dtype))


def rope(x_btnh, positions_bt, theta: float):
    """Rotary embedding, rotate-half layout (as Hugging Face Llama/Qwen3)."""
    h = x_btnh.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, h, 2, dtype=jnp.float32) / h))
    angles_bth = positions_bt[..., None].astype(jnp.float32) * inv_freq
    angles_bth = jnp.concatenate([angles_bth, angles_bth], axis=-1)
    cos, sin = jnp.cos(angles_bth)[:, :, None, :], jnp.sin(angles_bth)[:, :, None, :]
    x32 = x_btnh.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return (x32 * cos + rotated * sin).astype(x_btnh.dtype)


def _kernel(module: nn.Module, shape, names, cfg: presets.ModelConfig):
    """The module's `kernel` parameter (logically named axes) in the compute dtype."""
    kernel = module.param(
        "kernel",
        nn.with_logical_partitioning(nn.initializers.normal(stddev=0.02), names),
        shape,
        dtype_of(cfg.param_dtype),
    )
    return kernel.astype(dtype_of(cfg.dtype))


class Kernel(nn.Module):
    """A bare projection kernel, for layers that apply it in a function of their own."""

    shape: tuple[int, ...]
    names: tuple[str, ...]
    cfg: presets.ModelConfig

    @nn.compact
    def __call__(self):
        return _kernel(self, self.shape, self.names, self.cfg)


class Dense(nn.Module):
    """Bias-free projection `einsum(spec, x, kernel)` with logically named kernel axes.

    Replaces `nn.DenseGeneral`, whose initializer sees a flattened kernel and
    so cannot carry per-axis logical names.
    """

    spec: str
    shape: tuple[int, ...]
    names: tuple[str, ...]
    cfg: presets.ModelConfig

    @nn.compact
    def __call__(self, x):
        kernel = _kernel(self, self.shape, self.names, self.cfg)
        return jnp.einsum(self.spec, x.astype(kernel.dtype), kernel)


class Attention(nn.Module):
    """Grouped-query self-attention over the current tokens plus an optional KV cache.

    Masking is expressed with slots and segments so that training (packed
    sequences) and decoding (left-padded prompts, growing cache) share one
    code path: query at slot i may attend key at slot j iff j <= i, both lie in
    the same segment, and the key segment is not padding (0). The scores are
    computed by `kernels/attention/api.py` with `cfg.attention_impl`.

    With a KV cache (`kv_cache` layout) `layer` is the traced index of this
    layer in a stacked (scanned) cache, or None when `cache` is this layer's own.
    """

    cfg: presets.ModelConfig
    per_row_cache: bool = False  # q_slot_bt differs per row (one write slot each)

    @nn.compact
    def __call__(self, x_btd, positions_bt, q_slot_bt, q_seg_bt, cache=None, layer=None):
        cfg = self.cfg
        n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        d = cfg.d_model
        q_btnh = Dense(
            "btd,dnh->btnh", (d, n, h), ("embed", "heads", "head_dim"), cfg, name="q_proj"
        )(x_btd)
        k_btkh = Dense(
            "btd,dkh->btkh", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, name="k_proj"
        )(x_btd)
        v_btkh = Dense(
            "btd,dkh->btkh", (d, k, h), ("embed", "kv_heads", "head_dim"), cfg, name="v_proj"
        )(x_btd)
        if cfg.qk_norm:
            head_norm = functools.partial(
                RMSNorm, cfg.rms_eps, cfg.dtype, cfg.param_dtype, "head_dim", True
            )
            q_btnh = head_norm(name="q_norm")(q_btnh)
            k_btkh = head_norm(name="k_norm")(k_btkh)
        q_btnh = constrain(rope(q_btnh, positions_bt, cfg.rope_theta), _ACT_Q)
        k_btkh = constrain(rope(k_btkh, positions_bt, cfg.rope_theta), _ACT_KV)
        v_btkh = constrain(v_btkh, _ACT_KV)

        if cache:
            new_cache = kv_cache.write(
                cache, layer, k_btkh, v_btkh, q_seg_bt, q_slot_bt, per_row=self.per_row_cache
            )
        else:
            new_cache = cache
        attend = functools.partial(
            attention_api.attention,
            implementation=cfg.attention_impl,
            self_attention=not cache,
            mesh_axes=_mesh_axes(),
        )
        if cache:
            # Reads only the filled part of this layer's cache (length buckets).
            filled = jnp.max(q_slot_bt) + 1
            out_btnh = attention_decode.attention(
                attend,
                q_btnh,
                q_slot_bt,
                q_seg_bt,
                functools.partial(kv_cache.read, new_cache, layer),
                kv_cache.length(new_cache),
                filled,
            )
        else:
            out_btnh = attend(q_btnh, k_btkh, v_btkh, q_slot_bt, q_seg_bt, q_slot_bt, q_seg_bt)
        out_btnh = constrain(out_btnh.astype(dtype_of(cfg.dtype)), _ACT_Q)
        out_btd = Dense(
            "btnh,nhd->btd", (n, h, d), ("heads", "head_dim", "embed"), cfg, name="o_proj"
        )(out_btnh)
        return out_btd, new_cache


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    cfg: presets.ModelConfig

    @nn.compact
    def __call__(self, x_btd):
        cfg = self.cfg
        d, f = cfg.d_model, cfg.d_ff
        w_gate = Kernel((d, f), ("embed", "mlp"), cfg, name="gate_proj")()
        w_up = Kernel((d, f), ("embed", "mlp"), cfg, name="up_proj")()
        w_down = Kernel((f, d), ("mlp", "embed"), cfg, name="down_proj")()

        def mlp(x_btd):
            return swiglu.swiglu(x_btd, w_gate, w_up, w_down, constrain_btf=_constrain_btf)

        x_btd = x_btd.astype(w_gate.dtype)
        chunk, t = cfg.mlp_seq_chunk, x_btd.shape[1]
        if chunk and t > chunk and t % chunk == 0:
            return _sequence_chunked(mlp, x_btd, chunk)
        return mlp(x_btd)


def _sequence_chunked(fn, x_btd, chunk: int):
    """`fn` over `chunk`-token slices of the sequence, one at a time, each rematerialized.

    The backward keeps one slice's `[B, chunk, F]` activations live instead
    of the whole sequence's. Slices are taken from the gathered sequence and
    returned whole (`act_len`); the caller's constraint re-splits them.
    """
    b, t, d = x_btd.shape
    full = ("act_batch", "act_len", "act_embed")
    x_nbcd = jnp.moveaxis(constrain(x_btd, full).reshape(b, t // chunk, chunk, d), 1, 0)
    y_nbcd = jax.lax.map(jax.checkpoint(lambda x: constrain(fn(constrain(x, full)), full)), x_nbcd)
    return jnp.moveaxis(y_nbcd, 0, 1).reshape(b, t, -1)


def _constrain_btf(x_btf):
    return constrain(x_btf, ("act_batch", "act_len", "act_mlp"))


_ACT_Q = ("act_batch", "act_len", "act_heads", None)
_ACT_KV = ("act_batch", "act_len", "act_kv_heads", None)


def _mesh_axes() -> attention_sharded.MeshAxes:
    """Mesh axes of batch and heads under the current logical rules (for shard_map)."""
    q = nn.logical_to_mesh_axes(_ACT_Q)
    kv = nn.logical_to_mesh_axes(_ACT_KV)
    return attention_sharded.MeshAxes(batch=q[0], heads=q[2], kv_heads=kv[2])
