"""Policy surrogate: clip settings and aggregations against hand values, micro-batch exactness,
and the on-policy gradient against REINFORCE on a linear-softmax policy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.losses import policy

NAN, INF = float("nan"), float("inf")
# Importance ratios per token (old log-prob 0, so log π_θ = log r). Masked slots hold
# garbage that must not leak into values or gradients.
RATIO = np.array([[1.5, 0.5, 1.0], [1.5, 0.5, 4.0], [1.1, 1.0, 1.0], [1.0, 1.0, 1.0]])
LOGP = jnp.array(np.log(RATIO), jnp.float32).at[0, 2].set(INF).at[2, 1].set(NAN)
OLD = jnp.zeros((4, 3)).at[3, 0].set(NAN)
ADV = jnp.array([1.0, -1.0, 2.0, 5.0])
MASK = jnp.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]])
# Per-token losses with ε_low = 0.2, ε_high = 0.28:
#   seq0 (A=+1): r=1.5 → max(−1.5, −1.28) = −1.28 (clipped);  r=0.5 → max(−0.5, −0.8) = −0.5
#   seq1 (A=−1): r=1.5 → max(1.5, 1.28) = 1.5;  r=0.5 → max(0.5, 0.8) = 0.8 (clipped);  r=4 → 4.0
#   seq2 (A=+2): r=1.1 → −2.2;  seq3 has no valid token.
CLIP = dict(clip_low=0.2, clip_high=0.28)


def _loss(**kw):
    num, den, metrics = policy.policy_loss(LOGP, OLD, ADV, MASK, **{**CLIP, **kw})
    return float(num), float(den), {k: (float(s), float(c)) for k, (s, c) in metrics.items()}


@pytest.mark.parametrize(
    ("kw", "num", "den"),
    [
        (dict(aggregation="token_mean"), -1.78 + 6.3 - 2.2, 6.0),
        (dict(aggregation="seq_mean_token_mean"), -1.78 / 2 + 6.3 / 3 - 2.2, 3.0),
        (dict(aggregation="seq_mean_token_sum"), -1.78 + 6.3 - 2.2, 3.0),
        (dict(aggregation="seq_mean_token_sum", seq_len_norm=4), (-1.78 + 6.3 - 2.2) / 4, 3.0),
        # Symmetric clip: seq0 r=1.5 gives −1.2 instead of −1.28.
        (dict(clip_high=0.2), -1.7 + 6.3 - 2.2, 6.0),
        # Dual clip c=3 bounds seq1's r=4 token (A=−1) at 3·|A| = 3.
        (dict(dual_clip=3.0), -1.78 + 5.3 - 2.2, 6.0),
        (dict(dual_clip=3.0, aggregation="seq_mean_token_mean"), -0.89 + 5.3 / 3 - 2.2, 3.0),
        # No clipping: −A·r.
        (dict(clip=False), -2.0 + 6.0 - 2.2, 6.0),
    ],
)
def test_hand_values(kw, num, den):
    got_num, got_den, _ = _loss(**kw)
    np.testing.assert_allclose(got_num, num, rtol=1e-6, atol=1e-6)
    assert got_den == den


def test_metrics():
    _, _, m = _loss()
    assert m["clip_frac"] == (2.0, 6.0)
    assert m["dual_clip_frac"] == (0.0, 6.0)
    np.testing.assert_allclose(m["ratio_mean"], (9.1, 6.0), rtol=1e-6)
    # Σ r − 1 − log r over the six valid tokens.
    np.testing.assert_allclose(m["approx_kl"], (2.19375960, 6.0), rtol=1e-6)
    _, _, m = _loss(dual_clip=3.0)
    assert m["dual_clip_frac"] == (1.0, 6.0)
    assert m["clip_frac"] == (2.0, 6.0)
    _, _, m = _loss(clip=False)
    assert m["clip_frac"] == (0.0, 6.0)


def test_token_advantages_match_broadcast_and_jit():
    ref = policy.policy_loss(LOGP, OLD, ADV, MASK, **CLIP)
    adv_bt = jnp.broadcast_to(ADV[:, None], (4, 3)).at[3, 2].set(NAN)
    fn = jax.jit(functools.partial(policy.policy_loss, **CLIP, aggregation="token_mean"))
    got = fn(LOGP, OLD, adv_bt, MASK)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1])


def test_garbage_in_padding_gives_finite_gradient():
    def loss(logp):
        num, den, _ = policy.policy_loss(logp, OLD, ADV, MASK, **CLIP, dual_clip=3.0)
        return num / den

    g = jax.grad(loss)(LOGP)
    assert np.all(np.isfinite(g))
    assert float(g[0, 2]) == 0.0 and float(g[2, 1]) == 0.0 and float(g[0, 0]) == 0.0  # clipped
    # Unclipped seq0 r=0.5 token: ∂(−A·r)/∂log π / N = −1·0.5 / 6.
    np.testing.assert_allclose(g[0, 1], -0.5 / 6, rtol=1e-6)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="aggregation"):
        policy.policy_loss(LOGP, OLD, ADV, MASK, aggregation="seq_sum")
    with pytest.raises(ValueError, match="dual_clip"):
        policy.policy_loss(LOGP, OLD, ADV, MASK, dual_clip=0.5)
    with pytest.raises(ValueError, match="seq_len_norm"):
        policy.policy_loss(LOGP, OLD, ADV, MASK, seq_len_norm=8)


def _random_batch(b=6, t=5):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    logp = -jnp.abs(jax.random.normal(k1, (b, t)))
    old = logp + 0.5 * jax.random.normal(k2, (b, t))  # ratios on both sides of the band
    adv = jax.random.normal(k3, (b,))
    lengths = jnp.array([5, 3, 0, 1, 4, 2])  # includes a sequence without valid tokens
    mask = (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.int32)
    return logp, old, adv, mask


@pytest.mark.parametrize(
    "kw",
    [
        dict(aggregation="token_mean"),
        dict(aggregation="seq_mean_token_mean"),
        dict(aggregation="seq_mean_token_sum"),
        dict(aggregation="seq_mean_token_sum", seq_len_norm=5),
        dict(aggregation="token_mean", dual_clip=3.0, clip_high=0.28),
    ],
)
def test_micro_batch_exactness(kw):
    logp, old, adv, mask = _random_batch()
    num, den, m = policy.policy_loss(logp, old, adv, mask, **kw)
    halves = [
        policy.policy_loss(logp[s], old[s], adv[s], mask[s], **kw)
        for s in (slice(0, 3), slice(3, 6))
    ]
    np.testing.assert_allclose(halves[0][0] + halves[1][0], num, rtol=1e-6, atol=1e-7)
    assert float(halves[0][1] + halves[1][1]) == float(den)
    for key in m:
        np.testing.assert_allclose(
            halves[0][2][key][0] + halves[1][2][key][0], m[key][0], rtol=1e-6
        )
    assert float(m["clip_frac"][0]) > 0  # the batch exercises clipping


def test_on_policy_gradient_is_reinforce():
    """old = stop_gradient(logp) ⇒ ∇(num/den) = −Σ m·A·∇log π / Σ m (clipping never binds)."""
    b, t, d, v = 3, 4, 3, 5
    kx, kw, ky = jax.random.split(jax.random.key(1), 3)
    x_btd = jax.random.normal(kx, (b, t, d))
    w_dv = jax.random.normal(kw, (d, v))
    y_bt = jax.random.randint(ky, (b, t), 0, v)
    mask = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    adv = jnp.array([1.0, -0.5, 2.0])

    def logp_fn(w):
        logits = jnp.einsum("btd,dv->btv", x_btd, w)
        return jnp.take_along_axis(jax.nn.log_softmax(logits), y_bt[..., None], -1)[..., 0]

    def loss(w, clip):
        logp = logp_fn(w)
        num, den, m = policy.policy_loss(
            logp, jax.lax.stop_gradient(logp), adv, mask, clip=clip, dual_clip=3.0
        )
        return num / den, m

    (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(w_dv, True)

    # Hand REINFORCE: ∇_W log softmax(xW)[y] = x ⊗ (onehot(y) − softmax(xW)).
    x, w, y, m, a = (np.asarray(z, np.float64) for z in (x_btd, w_dv, y_bt, mask, adv))
    logits = x @ w
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    score = np.eye(v)[y.astype(int)] - p  # [b, t, v]
    n = m.sum()
    expected = -np.einsum("bt,b,btd,btv->dv", m, a, x, score) / n
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, -(3 * 1.0 + 2 * -0.5 + 4 * 2.0) / 9, rtol=1e-6)
    assert float(metrics["clip_frac"][0]) == 0.0
    np.testing.assert_allclose(metrics["ratio_mean"][0], 9.0)
    grad_unclipped = jax.grad(lambda w: loss(w, False)[0])(w_dv)
    np.testing.assert_allclose(grad_unclipped, grad, rtol=1e-6)


def test_entropy_bonus():
    ent = jnp.array([[1.0, 2.0, NAN], [4.0, 0.0, 0.0]])
    mask = jnp.array([[1, 1, 0], [1, 0, 0]])
    num, den = policy.entropy_bonus(ent, mask, coef=0.01)
    np.testing.assert_allclose(num, -0.07, rtol=1e-6)
    assert float(den) == 3.0
    num, den = policy.entropy_bonus(ent, mask, coef=0.01, aggregation="seq_mean_token_mean")
    np.testing.assert_allclose(num, -0.01 * (1.5 + 4.0), rtol=1e-6)
    assert float(den) == 2.0
    assert float(policy.entropy_bonus(ent, mask)[0]) == 0.0
