"""The hand-written SwiGLU backward equals autodiff of the forward formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.model import swiglu


def _plain(x, w_gate, w_up, w_down):
    hidden = jax.nn.silu(jnp.einsum("btd,df->btf", x, w_gate)) * jnp.einsum("btd,df->btf", x, w_up)
    return jnp.einsum("btf,fd->btd", hidden, w_down)


@pytest.mark.parametrize(
    "dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)], ids=["f32", "bf16"]
)
def test_values_and_gradients_match_autodiff(dtype, tol):
    rng = np.random.default_rng(0)
    b, t, d, f = 2, 24, 16, 40
    x = jnp.asarray(rng.normal(size=(b, t, d)), dtype)
    w_gate, w_up = (jnp.asarray(rng.normal(size=(d, f)) * 0.3, dtype) for _ in range(2))
    w_down = jnp.asarray(rng.normal(size=(f, d)) * 0.3, dtype)
    cot = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)

    def loss(fn):
        return lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * cot)

    args = (x, w_gate, w_up, w_down)
    out, ref = swiglu.swiglu(*args), _plain(*args)
    assert out.dtype == dtype
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(ref, np.float32), rtol=tol, atol=tol
    )
    grads = jax.grad(loss(swiglu.swiglu), argnums=(0, 1, 2, 3))(*args)
    ref_grads = jax.grad(loss(_plain), argnums=(0, 1, 2, 3))(*args)
    for g, rg, a in zip(grads, ref_grads, args, strict=True):
        assert g.dtype == a.dtype and g.shape == a.shape
        rg = np.asarray(rg, np.float32)
        scale = np.abs(rg).max()
        assert scale > 0
        np.testing.assert_allclose(np.asarray(g, np.float32), rg, atol=tol * scale, rtol=tol)


def test_constraint_is_applied_to_the_hidden_activations():
    seen = []

    def constrain(x_btf):
        seen.append(x_btf.shape)
        return x_btf

    x = jnp.ones((1, 3, 4))
    w = jnp.ones((4, 5)) * 0.1
    jax.grad(lambda x: jnp.sum(swiglu.swiglu(x, w, w, w.T, constrain_btf=constrain)))(x)
    assert seen and set(seen) == {(1, 3, 5)}
