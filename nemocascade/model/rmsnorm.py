"""RMSNorm as one function with a hand-written backward (used for the q/k norms).

    y = x̂ ∘ s,   x̂ = x r,   r = (mean(x²) + ε)^(-1/2)   (over the last axis, float32)

Backward, with g = dy ∘ s:

    dx = r (g − x̂ mean(g ∘ x̂)),   ds = Σ_rows dy ∘ x̂

The same arithmetic as autodiff of the forward. Written out for the reason
`swiglu.py` gives: on XLA:CPU autodiff's backward of the q/k norms fused
with the transposed copy that the q/k projections' weight-gradient dots ask
for, and that fusion ran at a fraction of memory bandwidth
(docs/benchmarks.md, "Step efficiency"). The norms over `d_model` keep
autodiff, which is faster there.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def rms_norm(x, scale, eps: float, out_dtype):
    """`x` normalized over its last axis and scaled, in `out_dtype`."""
    return _forward(x, scale, eps, out_dtype)[0]


def _forward(x, scale, eps, out_dtype):
    x32 = x.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    y = (x32 * r * scale.astype(jnp.float32)).astype(out_dtype)
    return y, (x, scale, r)


def _backward(eps, out_dtype, res, dy):
    del eps, out_dtype
    x, scale, r = res
    x_hat = x.astype(jnp.float32) * r
    dy32 = dy.astype(jnp.float32)
    g = dy32 * scale.astype(jnp.float32)
    dx = r * (g - x_hat * jnp.mean(g * x_hat, axis=-1, keepdims=True))
    d_scale = jnp.sum(dy32 * x_hat, axis=tuple(range(x.ndim - 1)))
    return dx.astype(x.dtype), d_scale.astype(scale.dtype)


rms_norm.defvjp(_forward, _backward)
