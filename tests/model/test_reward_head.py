"""Reward head: last-token readout, causality, gradients through Bradley–Terry, init."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.losses import reward_model as rm_loss
from nemocascade.model import presets, reward_head, transformer

CFG = presets.ModelConfig(
    vocab_size=64,
    d_model=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    d_ff=64,
    qk_norm=True,
    max_seq_len=32,
)


_init = jax.jit(lambda key: nn.meta.unbox(reward_head.init_params(CFG, key)))
_score = jax.jit(reward_head.score, static_argnums=1)
_hidden = jax.jit(
    lambda p, tokens: transformer.Transformer(CFG).apply(
        {"params": p}, tokens, jnp.arange(tokens.shape[1], dtype=jnp.int32)[None]
    )[0]
)


def _params(seed=0):
    return _init(jax.random.key(seed))


def _rows(seed=0, b=4, t=12):
    rng = np.random.default_rng(seed)
    lengths = np.array([5, 12, 1, 8])[:b]
    tokens = rng.integers(1, CFG.vocab_size, (b, t)).astype(np.int32)
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
    return tokens * mask, mask, (lengths - 1).astype(np.int32)


def test_params_layout_and_logical_axes():
    boxed = jax.eval_shape(lambda: reward_head.init_params(CFG, jax.random.key(0)))
    specs = nn.get_partition_spec(boxed)
    assert specs["head"]["kernel"] == jax.sharding.PartitionSpec("embed")
    assert specs["head"]["bias"] == jax.sharding.PartitionSpec()
    params = nn.meta.unbox(boxed)
    assert params["head"]["kernel"].shape == (CFG.d_model,)
    assert params["head"]["bias"].shape == ()
    policy = jax.eval_shape(lambda: transformer.init_params(CFG, jax.random.key(0)))
    assert jax.tree.structure(params["backbone"]) == jax.tree.structure(nn.meta.unbox(policy))


def test_score_is_head_of_last_token_hidden_state():
    params = _params()
    tokens, mask, last = _rows()
    r = _score(params, CFG, tokens, mask, last)
    assert r.dtype == jnp.float32 and r.shape == (4,)
    # Reference: a row alone, unpadded, read at its final token.
    for i in (0, 3):
        hidden = _hidden(params["backbone"], tokens[i : i + 1, : int(last[i]) + 1])
        want = hidden[0, -1] @ params["head"]["kernel"] + params["head"]["bias"]
        np.testing.assert_allclose(r[i], want, rtol=1e-5, atol=1e-5)


def test_tokens_after_last_do_not_change_the_score():
    params = _params()
    tokens, mask, last = _rows()
    r = _score(params, CFG, tokens, mask, last)
    after = np.arange(tokens.shape[1])[None] > last[:, None]
    noise = np.random.default_rng(1).integers(1, CFG.vocab_size, tokens.shape)
    changed = np.where(after, noise, tokens).astype(np.int32)
    np.testing.assert_allclose(_score(params, CFG, changed, mask, last), r, atol=1e-6)
    # Even marked as real tokens, later positions cannot reach `last` (causal).
    full = np.ones_like(mask)
    np.testing.assert_allclose(_score(params, CFG, changed, full, last), r, atol=1e-5)
    # A token at or before `last` does change it.
    edited = tokens.copy()
    edited[:, 0] = (edited[:, 0] % (CFG.vocab_size - 1)) + 1
    assert np.all(np.abs(np.asarray(_score(params, CFG, edited, mask, last)) - r) > 0)


def test_bradley_terry_gradient_reaches_head_and_backbone():
    params = _params()
    chosen, mask_c, last_c = _rows(seed=2)
    rejected, mask_r, last_r = _rows(seed=3)

    def loss(p):
        r_c = reward_head.score(p, CFG, chosen, mask_c, last_c)
        r_r = reward_head.score(p, CFG, rejected, mask_r, last_r)
        num, den, _ = rm_loss.bradley_terry_loss(r_c, r_r)
        return num / den

    grads = jax.jit(jax.grad(loss))(params)
    norm = lambda tree: float(jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(tree))))  # noqa: E731
    assert norm(grads["head"]["kernel"]) > 1e-3
    assert abs(float(grads["head"]["bias"])) == 0.0  # cancels between r⁺ and r⁻
    assert norm(grads["backbone"]["embed"]) > 1e-6
    assert norm(grads["backbone"]["layers"]) > 1e-6


def test_init_from_policy_keeps_the_backbone():
    policy = _params(7)["backbone"]
    params = jax.jit(reward_head.init_from_policy)(policy, jax.random.key(1))
    for a, b in zip(jax.tree.leaves(params["backbone"]), jax.tree.leaves(policy), strict=True):
        np.testing.assert_array_equal(a, b)
    kernel = np.asarray(params["head"]["kernel"])
    assert kernel.shape == (CFG.d_model,) and float(params["head"]["bias"]) == 0.0
    # Scores start small whatever D is (unit-RMS hidden states).
    assert (
        0.2 * reward_head.HEAD_INIT_SCALE
        < np.linalg.norm(kernel)
        < 3 * (reward_head.HEAD_INIT_SCALE)
    )
