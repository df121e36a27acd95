"""Model invariants: causality, packing isolation, cache == full forward, presets."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.model import presets, transformer
from tests.trainer import helpers

CFG = helpers.TOY_MODEL


@pytest.fixture(scope="module")
def params():
    return nn.meta.unbox(transformer.init_params(CFG, jax.random.key(0)))


@functools.partial(jax.jit, static_argnames="cfg")
def _forward(params, tokens, positions=None, segments=None, cfg=CFG):
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    h, _ = transformer.Transformer(cfg).apply({"params": params}, tokens, positions, segments)
    return h


def test_causality_gradient_of_position_t_wrt_later_tokens_is_zero(params):
    t = 12
    tokens = jax.random.randint(jax.random.key(1), (1, t), 0, CFG.vocab_size)

    # d hidden[pos] / d embedding[tok] is zero for every token seen only later.
    def early_sum(params_embed, pos):
        p = {**params, "embed": {"embedding": params_embed}}
        return _forward(p, tokens)[0, pos].sum()

    grad = jax.jit(jax.grad(early_sum), static_argnums=1)
    for pos in (0, 5, 10):
        g = grad(params["embed"]["embedding"], pos)
        later = np.asarray(tokens[0, pos + 1 :])
        earlier = set(np.asarray(tokens[0, : pos + 1]).tolist())
        for tok in later:
            if tok not in earlier:
                assert np.all(np.asarray(g[tok]) == 0.0), (pos, tok)
        assert np.any(np.asarray(g[int(tokens[0, pos])]) != 0.0)


def test_changing_future_tokens_leaves_past_unchanged(params):
    a = jax.random.randint(jax.random.key(2), (2, 10), 0, CFG.vocab_size)
    b = a.at[:, 6:].set((a[:, 6:] + 7) % CFG.vocab_size)
    np.testing.assert_array_equal(_forward(params, a)[:, :6], _forward(params, b)[:, :6])


def test_packed_segments_equal_separate_sequences(params):
    x = jax.random.randint(jax.random.key(3), (1, 7), 0, CFG.vocab_size)
    y = jax.random.randint(jax.random.key(4), (1, 5), 0, CFG.vocab_size)
    packed = jnp.concatenate([x, y], axis=1)
    positions = jnp.concatenate([jnp.arange(7), jnp.arange(5)])[None]
    segments = jnp.array([[1] * 7 + [2] * 5])
    h = _forward(params, packed, positions, segments)
    np.testing.assert_allclose(h[:, :7], _forward(params, x), atol=1e-5)
    np.testing.assert_allclose(h[:, 7:], _forward(params, y), atol=1e-5)


@pytest.mark.parametrize("scan", [True, False])
def test_cached_decode_equals_full_forward(params, scan):
    cfg = dataclasses.replace(CFG, scan_layers=scan)
    p = params
    if not scan:
        p = nn.meta.unbox(transformer.init_params(cfg, jax.random.key(0)))
    t = 9
    tokens = jax.random.randint(jax.random.key(5), (2, t), 0, CFG.vocab_size)
    full = _forward(p, tokens, cfg=cfg)
    cache = transformer.init_cache(cfg, 2, 16)
    apply = jax.jit(transformer.Transformer(cfg).apply)
    pos = jnp.broadcast_to(jnp.arange(t), (2, t))
    h, cache = apply({"params": p}, tokens[:, :4], pos[:, :4], cache=cache, cache_index=0)
    outs = [h]
    for i in range(4, t):
        h, cache = apply(
            {"params": p}, tokens[:, i : i + 1], pos[:, i : i + 1], cache=cache, cache_index=i
        )
        outs.append(h)
    # f32, different reduction shapes: 1e-5 absolute on O(1) hidden states.
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, atol=1e-5)


def test_unrolled_layers_start_from_the_scanned_init(params):
    """Both layouts draw the same weights: unrolled layer i is slice i of the scanned stack."""
    assert CFG.scan_layers
    cfg = dataclasses.replace(CFG, scan_layers=False)
    boxed = transformer.init_params(cfg, jax.random.key(0))
    unrolled = nn.meta.unbox(boxed)
    assert "layers" not in unrolled and len(unrolled) == len(params) + CFG.num_layers - 1
    for i in range(CFG.num_layers):
        jax.tree.map(
            lambda u, s, i=i: np.testing.assert_array_equal(u, s[i]),
            unrolled[f"layer_{i}"],
            params["layers"],
        )
    np.testing.assert_array_equal(unrolled["embed"]["embedding"], params["embed"]["embedding"])
    # The per-layer boxes keep their own logical axes (no "layers" axis).
    spec = nn.get_partition_spec(boxed)["layer_0"]["mlp"]["up_proj"]["kernel"]
    assert tuple(spec) == ("embed", "mlp")
    tokens = jax.random.randint(jax.random.key(5), (2, 9), 0, CFG.vocab_size)
    np.testing.assert_allclose(
        _forward(unrolled, tokens, cfg=cfg), _forward(params, tokens), atol=1e-5
    )


def test_param_count_matches_preset_formula(params):
    assert sum(x.size for x in jax.tree.leaves(params)) == CFG.num_params


def test_untied_embeddings_have_lm_head():
    cfg = dataclasses.replace(CFG, tie_embeddings=False)
    p = jax.eval_shape(lambda: nn.meta.unbox(transformer.init_params(cfg, jax.random.key(0))))
    assert transformer.unembedding(p, cfg).shape == (cfg.d_model, cfg.vocab_size)
    assert sum(x.size for x in jax.tree.leaves(p)) == cfg.num_params


def test_qwen3_8b_preset_has_published_shapes():
    cfg = presets.get_preset("qwen3_8b")
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (4096, 36, 32, 8)
    assert cfg.vocab_size == 151_936 and cfg.d_ff == 12_288 and cfg.qk_norm
    assert 8.1e9 < cfg.num_params < 8.3e9  # Qwen3-8B: 8.19B parameters


def test_bad_preset_values_name_the_field():
    with pytest.raises(ValueError, match="model.num_heads"):
        presets.get_preset("tiny", num_heads=5)
    with pytest.raises(ValueError, match="model.preset"):
        presets.get_preset("nope")


def test_sequence_chunked_mlp_equals_the_whole_sequence(params):
    """`mlp_seq_chunk`: same hidden states and gradients, computed over 4 slices."""
    chunked = dataclasses.replace(CFG, mlp_seq_chunk=8)
    tokens = jax.random.randint(jax.random.key(2), (2, 32), 0, CFG.vocab_size)

    def loss(params, cfg):
        return jnp.sum(_forward(params, tokens, cfg=cfg) ** 2)

    text = str(jax.make_jaxpr(functools.partial(loss, cfg=chunked))(params))
    assert "length=4" in text  # the MLP runs as a loop over 4 slices
    assert "length=4" not in str(jax.make_jaxpr(functools.partial(loss, cfg=CFG))(params))
    np.testing.assert_allclose(
        _forward(params, tokens, cfg=chunked), _forward(params, tokens), atol=1e-5, rtol=1e-5
    )
    grads = jax.grad(loss)(params, chunked)
    ref = jax.grad(loss)(params, CFG)
    # float32, rematerialized and fused differently: within 1e-4 of each leaf's scale.
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), strict=True):
        scale = float(np.abs(r).max())
        assert scale > 0
        np.testing.assert_allclose(g, r, atol=1e-4 * scale, rtol=0)
