"""Sharded fused log-prob on the 8 fake CPU devices against the unsharded reference.

Tokens are sharded over 'data', the vocabulary over 'tensor'. With V = 256 on
4 vocabulary shards of 64 columns and 150 valid columns, shard 2 is partly and
shard 3 wholly vocabulary padding. Tolerances as in test_fused_logprob.py
(float32: 2e-5 values, 5e-5 gradients).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.kernels.fused_logprob import api, sharded

P = jax.P
N, D, V, VALID, TEMPERATURE = 32, 32, 256, 150, 0.7
BLOCKS = {
    "chunked_xla": dict(token_block=8, vocab_block=32),
    "pallas_tpu": dict(token_block=8, vocab_block=128, interpret=True),
    "pallas_gpu": dict(token_block=16, vocab_block=32, interpret=True),
}


def _inputs():
    k = jax.random.split(jax.random.key(0), 5)
    hidden = jax.random.normal(k[0], (N, D))
    w = 0.3 * jax.random.normal(k[1], (D, V))
    targets = jax.random.randint(k[2], (N,), 0, VALID)
    return hidden, w, targets, jax.random.normal(k[3], (N,)), jax.random.normal(k[4], (N,))


def _value_and_grads(fn, hidden, w, targets, g_logp, g_ent):
    def loss(hidden, w):
        logp, ent = fn(hidden, w, targets)
        return jnp.sum(g_logp * logp + g_ent * ent), (logp, ent)

    (_, values), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(hidden, w)
    return values, grads


def _reference(hidden, w, targets, g_logp, g_ent, **kwargs):
    fn = lambda h, w, y: api.token_logprobs(
        h, w, y, implementation="reference", temperature=TEMPERATURE, valid_vocab=VALID, **kwargs
    )
    return _value_and_grads(fn, hidden, w, targets, g_logp, g_ent)


def _assert_close(actual, expected, atol):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.shape == e.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=atol)


@pytest.mark.parametrize("implementation", tuple(BLOCKS))
def test_sharded_matches_reference(implementation):
    hidden, w, targets, g_logp, g_ent = _inputs()
    mesh = jax.make_mesh((2, 4), ("data", "tensor"))
    # Explicit mesh axes (the default): inputs already laid out as the kernel wants.
    hidden_s = jax.device_put(hidden, jax.NamedSharding(mesh, P("data", None)))
    w_s = jax.device_put(w, jax.NamedSharding(mesh, P(None, "tensor")))
    fn = lambda h, w, y: sharded.token_logprobs(
        h,
        w,
        y,
        mesh=mesh,
        temperature=TEMPERATURE,
        valid_vocab=VALID,
        implementation=implementation,
        **BLOCKS[implementation],
    )
    actual = _value_and_grads(fn, hidden_s, w_s, targets, g_logp, g_ent)
    expected = _reference(hidden, w, targets, g_logp, g_ent)
    _assert_close(actual[0], expected[0], atol=2e-5)
    _assert_close(actual[1], expected[1], atol=5e-5)
    assert actual[1][0].sharding.spec == P("data", None)
    assert actual[1][1].sharding.spec == P(None, "tensor")
    assert not np.any(np.asarray(actual[1][1])[:, VALID:])


@pytest.mark.parametrize("batch_axes", [("data", "fsdp"), None])
def test_auto_mesh_and_batch_axes(batch_axes):
    """Auto axes, a two-axis batch sharding, and replicated tokens."""
    hidden, w, targets, g_logp, g_ent = _inputs()
    auto = jax.sharding.AxisType.Auto
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(auto,) * 3)
    fn = lambda h, w, y: sharded.token_logprobs(
        h,
        w,
        y,
        mesh=mesh,
        batch_axes=batch_axes,
        temperature=TEMPERATURE,
        valid_vocab=VALID,
        **BLOCKS["chunked_xla"],
    )
    actual = _value_and_grads(fn, hidden, w, targets, g_logp, g_ent)
    expected = _reference(hidden, w, targets, g_logp, g_ent)
    _assert_close(actual[0], expected[0], atol=2e-5)
    _assert_close(actual[1], expected[1], atol=5e-5)


def test_sharded_forward_only_and_without_entropy():
    hidden, w, targets, g_logp, g_ent = _inputs()
    mesh = jax.make_mesh((2, 4), ("data", "tensor"))
    kw = dict(mesh=mesh, temperature=TEMPERATURE, valid_vocab=VALID)
    logp, ent = jax.jit(
        lambda h, w: sharded.token_logprobs(h, w, targets, forward_only=True, **kw)
    )(hidden, w)
    (ref_logp, ref_ent), _ = _reference(hidden, w, targets, g_logp, g_ent)
    _assert_close((logp, ent), (ref_logp, ref_ent), atol=2e-5)
    fn = lambda h, w, y: sharded.token_logprobs(h, w, y, compute_entropy=False, **kw)
    (logp, ent), grads = _value_and_grads(fn, hidden, w, targets, g_logp, g_ent)
    _, ref_grads = _reference(hidden, w, targets, g_logp, 0.0 * g_ent, compute_entropy=False)
    assert not np.any(np.asarray(ent))
    _assert_close(logp, ref_logp, atol=2e-5)
    _assert_close(grads, ref_grads, atol=5e-5)
