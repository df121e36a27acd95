"""The SwiGLU feed-forward as one function with a hand-written backward.

    y = (silu(x Wg) ∘ (x Wu)) Wd,      silu(g) = g σ(g)

Backward, with h = silu(g) ∘ u and dh = dy Wdᵀ:

    du = dh ∘ silu(g)
    dg = dh ∘ u ∘ σ(g) (1 + g (1 − σ(g)))
    dx = dg Wgᵀ + du Wuᵀ,   dWg = xᵀ dg,   dWu = xᵀ du,   dWd = hᵀ dy

The same arithmetic as autodiff of the forward; written out so XLA sees the
gate's derivative as one elementwise expression feeding plain matmuls. On
XLA:CPU autodiff's version fuses that expression with a transposed copy for
the weight gradients, and the fused copy runs at a fraction of memory
bandwidth; the written-out backward avoids it (docs/benchmarks.md, "Step
efficiency"). The elementwise backward runs in float32 and is cast
back to the activation dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp


def _identity(x):
    return x


def swiglu(x_btd, w_gate_df, w_up_df, w_down_fd, constrain_btf: Callable = _identity):
    """`[B, T, D]` SwiGLU output; `constrain_btf` is applied to the hidden activations."""
    return _swiglu(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd)


def _forward_core(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd):
    gate = constrain_btf(jnp.einsum("btd,df->btf", x_btd, w_gate_df))
    up = constrain_btf(jnp.einsum("btd,df->btf", x_btd, w_up_df))
    hidden = constrain_btf(jax.nn.silu(gate) * up)
    return jnp.einsum("btf,fd->btd", hidden, w_down_fd), (gate, up)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _swiglu(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd):
    return _forward_core(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd)[0]


def _forward(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd):
    out, (gate, up) = _forward_core(constrain_btf, x_btd, w_gate_df, w_up_df, w_down_fd)
    return out, (x_btd, w_gate_df, w_up_df, w_down_fd, gate, up)


def _backward(constrain_btf, res, d_out_btd):
    x_btd, w_gate_df, w_up_df, w_down_fd, gate, up = res
    dtype = gate.dtype
    g, u = gate.astype(jnp.float32), up.astype(jnp.float32)
    sig = jax.nn.sigmoid(g)
    act = g * sig
    d_hidden = constrain_btf(
        jnp.einsum("btd,fd->btf", d_out_btd, w_down_fd, preferred_element_type=jnp.float32)
    )
    d_w_down = jnp.einsum("btf,btd->fd", (act * u).astype(dtype), d_out_btd)
    d_up = constrain_btf((d_hidden * act).astype(dtype))
    d_gate = constrain_btf((d_hidden * u * sig * (1.0 + g * (1.0 - sig))).astype(dtype))
    d_x = jnp.einsum("btf,df->btd", d_gate, w_gate_df) + jnp.einsum("btf,df->btd", d_up, w_up_df)
    d_w_gate = jnp.einsum("btd,btf->df", x_btd, d_gate)
    d_w_up = jnp.einsum("btd,btf->df", x_btd, d_up)
    return (
        d_x.astype(x_btd.dtype),
        d_w_gate.astype(w_gate_df.dtype),
        d_w_up.astype(w_up_df.dtype),
        d_w_down.astype(w_down_fd.dtype),
    )


_swiglu.defvjp(_forward, _backward)
