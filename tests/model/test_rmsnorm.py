"""The hand-written RMSNorm backward equals autodiff of the forward formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.model import rmsnorm

EPS = 1e-6


def _plain(x, scale, out_dtype):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPS)
    return (y * scale.astype(jnp.float32)).astype(out_dtype)


@pytest.mark.parametrize(
    "dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)], ids=["f32", "bf16"]
)
def test_values_and_gradients_match_autodiff(dtype, tol):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 6, 4, 16)) * 3.0, dtype)  # [B, T, N, H]
    scale = jnp.asarray(1.0 + 0.5 * rng.normal(size=(16,)), dtype)
    cot = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

    def loss(fn):
        return lambda x, s: jnp.sum(fn(x, s).astype(jnp.float32) * cot)

    def ours(x, s):
        return rmsnorm.rms_norm(x, s, EPS, dtype)

    def plain(x, s):
        return _plain(x, s, dtype)

    out = ours(x, scale)
    assert out.dtype == dtype
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(plain(x, scale), np.float32), rtol=tol, atol=tol
    )
    grads = jax.grad(loss(ours), argnums=(0, 1))(x, scale)
    ref_grads = jax.grad(loss(plain), argnums=(0, 1))(x, scale)
    for g, rg, a in zip(grads, ref_grads, (x, scale), strict=True):
        assert g.dtype == a.dtype and g.shape == a.shape
        rg = np.asarray(rg, np.float32)
        np.testing.assert_allclose(
            np.asarray(g, np.float32), rg, rtol=tol, atol=tol * np.abs(rg).max()
        )
