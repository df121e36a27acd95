"""Fused log-prob: every implementation against the materialized reference.

Tolerances: float32 inputs match the reference to 2e-5 absolute (values) and
5e-5 absolute (gradients, whose entries are O(1)); bf16 inputs to 1e-2 of the
largest reference magnitude (the backward casts dlogits to bf16 before its
matmuls, as intended for bf16 models). Pallas kernels run with
`interpret=True`. Shapes are ragged on purpose (45 tokens, 300 columns, 290
valid) so edge blocks and vocabulary padding are always exercised.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.kernels.fused_logprob import api, chunked_xla, online_softmax, pallas_gpu

N, D, V, VALID = 45, 32, 300, 290
# Small blocks so every implementation runs several token and vocabulary blocks.
BLOCKS = {
    "chunked_xla": dict(token_block=16, vocab_block=128),
    "pallas_tpu": dict(token_block=16, vocab_block=128, interpret=True),
    "pallas_gpu": dict(token_block=16, vocab_block=64, interpret=True),
}
FUSED = tuple(BLOCKS)
IMPLS = ("reference", *FUSED)


def _inputs(dtype=jnp.float32, n=N, d=D, v=V, valid=VALID, scale=0.3):
    k = jax.random.split(jax.random.key(0), 5)
    hidden = jax.random.normal(k[0], (n, d)).astype(dtype)
    w = (scale * jax.random.normal(k[1], (d, v))).astype(dtype)
    targets = jax.random.randint(k[2], (n,), 0, valid)
    g_logp = jax.random.normal(k[3], (n,))
    g_ent = jax.random.normal(k[4], (n,))
    return hidden, w, targets, g_logp, g_ent


def _value_and_grads(hidden, w, targets, g_logp, g_ent, **kwargs):
    """(logp, entropy), (dhidden, dw) of Σ g_logp·logp + g_ent·H."""

    def loss(hidden, w):
        logp, ent = api.token_logprobs(hidden, w, targets, **kwargs)
        return jnp.sum(g_logp * logp + g_ent * ent), (logp, ent)

    (_, values), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(hidden, w)
    return values, grads


@functools.cache
def _reference(dtype=jnp.float32, valid_vocab=VALID, temperature=0.7):
    """Reference values and gradients on `_inputs(dtype)` (computed once per case)."""
    return _value_and_grads(
        *_inputs(dtype),
        implementation="reference",
        valid_vocab=valid_vocab,
        temperature=temperature,
    )


def _assert_close(actual, expected, atol):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(e, np.float32), atol=atol)


@pytest.mark.parametrize("implementation", FUSED)
@pytest.mark.parametrize(("valid_vocab", "temperature"), [(None, 1.0), (VALID, 0.7)])
def test_values_and_grads_match_reference(implementation, valid_vocab, temperature):
    hidden, w, targets, g_logp, g_ent = _inputs()
    kw = dict(temperature=temperature, valid_vocab=valid_vocab)
    expected = _reference(jnp.float32, valid_vocab, temperature)
    actual = _value_and_grads(
        hidden,
        w,
        targets,
        g_logp,
        g_ent,
        implementation=implementation,
        **kw,
        **BLOCKS[implementation],
    )
    assert np.all(np.isfinite(np.asarray(actual[0])))
    _assert_close(actual[0], expected[0], atol=2e-5)
    _assert_close(actual[1], expected[1], atol=5e-5)
    # The padded columns receive no gradient at all.
    if valid_vocab is not None:
        assert not np.any(np.asarray(actual[1][1])[:, valid_vocab:])


@pytest.mark.parametrize("implementation", FUSED)
def test_bf16_inputs(implementation):
    hidden, w, targets, g_logp, g_ent = _inputs(jnp.bfloat16)
    kw = dict(temperature=0.7, valid_vocab=VALID)
    expected = _reference(jnp.bfloat16)
    actual = _value_and_grads(
        hidden,
        w,
        targets,
        g_logp,
        g_ent,
        implementation=implementation,
        **kw,
        **BLOCKS[implementation],
    )
    assert actual[0][0].dtype == jnp.float32 and actual[1][0].dtype == jnp.bfloat16
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        scale = float(jnp.max(jnp.abs(e.astype(jnp.float32))))
        _assert_close(a, e, atol=1e-2 * scale)


def test_masked_tokens_get_zero_gradient():
    implementation = "chunked_xla"  # the backward is shared by all fused paths
    hidden, w, targets, _, _ = _inputs()
    keep = np.arange(N) % 3 != 0

    def loss(hidden, w, targets, mask, **kwargs):
        logp, ent = api.token_logprobs(hidden, w, targets, valid_vocab=VALID, **kwargs)
        return jnp.sum(mask * (logp - 0.1 * ent))

    fused_loss = functools.partial(loss, implementation=implementation, **BLOCKS[implementation])
    dh, dw = jax.jit(jax.grad(fused_loss, argnums=(0, 1)))(
        hidden, w, targets, keep.astype(np.float32)
    )
    assert not np.any(np.asarray(dh)[~keep])
    assert np.all(np.any(np.asarray(dh)[keep] != 0, axis=-1))
    # dw only sees the unmasked tokens: the same as dropping the masked ones.
    ref_loss = functools.partial(loss, implementation="reference")
    dw_kept = jax.jit(jax.grad(ref_loss, argnums=1))(hidden[keep], w, targets[keep], 1.0)
    _assert_close(dw, dw_kept, atol=5e-5)


def test_without_entropy():
    hidden, w, targets, g_logp, g_ent = _inputs()
    kw = dict(valid_vocab=VALID, compute_entropy=False)
    (logp, ent), grads = _value_and_grads(
        hidden, w, targets, g_logp, g_ent, implementation="chunked_xla", **kw
    )
    (ref_logp, _), ref_grads = _value_and_grads(
        hidden, w, targets, g_logp, 0.0 * g_ent, implementation="reference", **kw
    )
    assert not np.any(np.asarray(ent))
    _assert_close(logp, ref_logp, atol=2e-5)
    _assert_close(grads, ref_grads, atol=5e-5)


def _primitive_names(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitive_names(sub)
    return names


def test_forward_only():
    hidden, w, targets, _, _ = _inputs()
    kw = dict(valid_vocab=VALID, implementation="chunked_xla", **BLOCKS["chunked_xla"])
    fused = jax.jit(lambda h: api.token_logprobs(h, w, targets, **kw))(hidden)
    forward_only = jax.jit(lambda h: api.token_logprobs(h, w, targets, forward_only=True, **kw))(
        hidden
    )
    _assert_close(forward_only, fused, atol=1e-6)
    # No custom VJP (so no residuals) and no gradient.
    jaxpr = jax.make_jaxpr(lambda h: api.token_logprobs(h, w, targets, forward_only=True, **kw))
    assert not any("custom_vjp" in name for name in _primitive_names(jaxpr(hidden).jaxpr))
    assert any(
        "custom_vjp" in name
        for name in _primitive_names(
            jax.make_jaxpr(lambda h: api.token_logprobs(h, w, targets, **kw))(hidden).jaxpr
        )
    )
    grad = jax.grad(
        lambda h: jnp.sum(api.token_logprobs(h, w, targets, forward_only=True, **kw)[0])
    )
    assert not np.any(np.asarray(jax.jit(grad)(hidden)))
    grad = jax.grad(
        lambda h: jnp.sum(jax.lax.stop_gradient(api.token_logprobs(h, w, targets, **kw)[0]))
    )
    assert not np.any(np.asarray(jax.jit(grad)(hidden)))


def test_chunked_never_holds_token_by_vocab_arrays():
    n, d, v = 256, 16, 1024
    hidden, w, targets, g_logp, g_ent = _inputs(n=n, d=d, v=v, valid=v)

    def loss(hidden, w):
        logp, ent = api.token_logprobs(
            hidden, w, targets, implementation="chunked_xla", token_block=64, vocab_block=128
        )
        return jnp.sum(g_logp * logp + g_ent * ent)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(hidden, w).jaxpr
    sizes = []

    def collect(jaxpr):
        for eqn in jaxpr.eqns:
            sizes.extend(
                np.prod(var.aval.shape) for var in eqn.outvars if hasattr(var.aval, "shape")
            )
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                collect(sub)

    collect(jaxpr)
    # Largest arrays: dw/w ([D, V] = 16k) and tiles (64 × 128 = 8k); logits would be 256k.
    assert max(sizes) == d * v


def test_leading_dims_are_flattened():
    hidden, w, targets, _, _ = _inputs()
    flat = api.token_logprobs(hidden[:44], w, targets[:44], implementation="chunked_xla")
    batched = api.token_logprobs(
        hidden[:44].reshape(4, 11, D), w, targets[:44].reshape(4, 11), implementation="chunked_xla"
    )
    assert batched[0].shape == (4, 11)
    _assert_close(jax.tree.map(lambda x: x.reshape(44), batched), flat, atol=0.0)


def test_entropy_of_large_logits_is_accurate():
    # Logits of magnitude ~100: lse − E_p[z] would cancel; log s − t/s does not.
    hidden, w, targets, _, _ = _inputs(scale=20.0)
    logp, ent = api.token_logprobs(hidden, w, targets, implementation="chunked_xla", vocab_block=64)
    logits = np.asarray(hidden, np.float64) @ np.asarray(w, np.float64)
    logq = logits - logits.max(-1, keepdims=True)
    logq -= np.log(np.exp(logq).sum(-1, keepdims=True))
    np.testing.assert_allclose(ent, -(np.exp(logq) * logq).sum(-1), atol=1e-4)
    np.testing.assert_allclose(logp, logq[np.arange(N), targets], atol=1e-3, rtol=1e-5)


@jax.jit
def _merge_cases(z, y):
    cols = jnp.arange(96)[None, :]
    valid = cols < 80  # the last block (64..95) is partly masked; `empty` is a wholly masked one
    whole = online_softmax.tile_partial(z, valid, cols == y)
    blocks = [
        online_softmax.tile_partial(
            z[:, a : a + 32], valid[:, a : a + 32], cols[:, a : a + 32] == y
        )
        for a in (0, 32, 64)
    ] + [online_softmax.empty((4, 1))]
    merged = online_softmax.merge_all(jax.tree.map(lambda *x: jnp.stack(x), *blocks), axis=0)
    sequential = blocks[0]
    for b in blocks[1:]:
        sequential = online_softmax.merge(sequential, b)
    return [online_softmax.finalize(p) for p in (whole, merged, sequential)]


def test_online_merge_of_blocks_equals_one_block():
    z = jax.random.normal(jax.random.key(1), (4, 96)) * 3
    whole, merged, sequential = _merge_cases(z, jnp.array([[0], [50], [95], [7]]))
    _assert_close(merged, whole, atol=1e-5)
    _assert_close(sequential, whole, atol=1e-5)


def test_dispatch_and_validation():
    hidden, w, targets, _, _ = _inputs()
    assert api.default_implementation() == "chunked_xla"  # tests run on CPU
    with pytest.raises(ValueError, match="Unknown fused log-prob implementation 'triton'"):
        api.token_logprobs(hidden, w, targets, implementation="triton")
    with pytest.raises(ValueError, match="valid_vocab"):
        api.token_logprobs(hidden, w, targets, valid_vocab=V + 1)
    with pytest.raises(ValueError, match="unembedding"):
        api.token_logprobs(hidden, w.T, targets)
    with pytest.raises(ValueError, match="block_vocab"):
        api.token_logprobs(hidden, w, targets, implementation="pallas_tpu", vocab_block=100)
    # Defaults of every implementation agree on a shape that is one block for all.
    everything = jax.jit(
        lambda h, w, y: {i: api.token_logprobs(h, w, y, implementation=i) for i in IMPLS}
    )(hidden, w, targets)
    for implementation in FUSED:
        _assert_close(everything[implementation], everything["reference"], atol=2e-5)


def test_chunk_sizes_do_not_change_results():
    hidden, w, targets, _, _ = _inputs()
    stats = jax.jit(
        lambda h, w, y: [
            online_softmax.finalize(chunked_xla.partial_stats(h, w, y, VALID, **blocks))
            for blocks in (
                dict(token_block=7, vocab_block=33),
                dict(token_block=64, vocab_block=1024),
            )
        ]
    )(hidden, w, targets)
    _assert_close(stats[0], stats[1], atol=1e-5)


def test_pallas_gpu_several_vocab_splits():
    # 300 columns in splits of 64 (two 32-column blocks each): 5 partials per token,
    # the last split half past the end of the vocabulary.
    hidden, w, targets, _, _ = _inputs()
    stats = jax.jit(
        lambda h, w, y: pallas_gpu.partial_stats(
            h,
            w,
            y,
            VALID,
            temperature=0.7,
            block_tokens=16,
            block_vocab=32,
            vocab_split=64,
            interpret=True,
        )
    )(hidden, w, targets)
    expected = api.token_logprobs(
        hidden, w, targets, temperature=0.7, valid_vocab=VALID, implementation="reference"
    )
    _assert_close(online_softmax.finalize(stats)[:2], expected, atol=2e-5)
