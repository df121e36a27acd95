"""Policy-gradient surrogate (GRPO / PPO family), loss aggregation and entropy bonus.

The Cascade recipe is strictly on-policy: callers pass
`old_logp_bt = jax.lax.stop_gradient(logp_bt)`, the importance ratio is 1 in
value, clipping never activates and the gradient is REINFORCE with group
normalized advantages, −Σ m·A·∇log π / Σ m. The clipped variants (clip-higher,
dual clip) serve off-policy reuse of a rollout batch.

Every loss returns `(numerator, denominator)`: the caller adds both over
micro-batches and hosts and divides once, which reproduces the full-batch value
exactly for every aggregation mode. Masked positions are replaced by zeros
*before* any arithmetic, so padding may hold any value (even ±inf or NaN).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")
# |log π_θ − log π_old| is clipped to this before exp (as verl does): r stays
# within [e⁻²⁰, e²⁰] ≈ [2e−9, 4.9e8], finite in float32, when a token's
# probability collapses or explodes between sampling and the update.
LOG_RATIO_CLAMP = 20.0

Pair = tuple[jax.Array, jax.Array]


def masked(x_bt: jax.Array, mask_bt: jax.Array) -> jax.Array:
    """float32 x·m with masked entries forced to 0 (so NaN/inf padding cannot leak)."""
    m = mask_bt.astype(jnp.float32)
    return jnp.where(m > 0, x_bt.astype(jnp.float32), 0.0) * m


def aggregate(
    loss_bt: jax.Array,
    mask_bt: jax.Array,
    aggregation: str = "token_mean",
    *,
    seq_len_norm: float | None = None,
) -> Pair:
    """Reduce a per-token loss to (numerator, denominator).

    With m the mask, n_b = Σ_t m_{b,t} and S = {b : n_b > 0}:

        token_mean           num = Σ_{b,t} m·ℓ               den = Σ_{b,t} m
        seq_mean_token_mean  num = Σ_b (Σ_t m·ℓ) / n_b        den = |S|
        seq_mean_token_sum   num = Σ_b (Σ_t m·ℓ) / L         den = |S|

    L is `seq_len_norm` (a constant such as the maximum response length, as in
    Dr. GRPO) or 1. Sequences without a valid token (padding rows, filtered
    samples) are left out of every denominator, so padding a batch with empty
    rows never changes the loss.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if seq_len_norm is not None and aggregation != "seq_mean_token_sum":
        raise ValueError("seq_len_norm applies only to aggregation='seq_mean_token_sum'")
    x_bt = masked(loss_bt, mask_bt)
    m_bt = mask_bt.astype(jnp.float32)
    if aggregation == "token_mean":
        return jnp.sum(x_bt), jnp.sum(m_bt)
    n_b = jnp.sum(m_bt, axis=-1)
    has_b = n_b > 0
    den = jnp.sum(has_b.astype(jnp.float32))
    sum_b = jnp.sum(x_bt, axis=-1)
    if aggregation == "seq_mean_token_mean":
        return jnp.sum(jnp.where(has_b, sum_b / jnp.where(has_b, n_b, 1.0), 0.0)), den
    return jnp.sum(sum_b) / (1.0 if seq_len_norm is None else float(seq_len_norm)), den


def policy_loss(
    logp_bt: jax.Array,
    old_logp_bt: jax.Array,
    adv_b: jax.Array,
    mask_bt: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "token_mean",
    clip: bool = True,
    seq_len_norm: float | None = None,
) -> tuple[jax.Array, jax.Array, dict[str, Pair]]:
    """Clipped policy-gradient surrogate as (numerator, denominator, metrics).

    Per valid token, with r = exp(clip(log π_θ − log π_old, ±20)) (the clamp is
    `LOG_RATIO_CLAMP`; no gradient where it binds) and advantage A:

        ℓ = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high))    (clip=True)
        ℓ = −A·r                                            (clip=False)
        ℓ = min(ℓ, c·|A|)  where A < 0                      (dual_clip=c)

    then `aggregate(ℓ, mask, aggregation)`. `adv_b` is [B] (one advantage per
    sequence, broadcast over its tokens) or [B, T]. Clip-higher is
    ε_high > ε_low. Dual clip (Ye et al. 2020, c > 1) bounds the loss of a
    negative-advantage token whose ratio has run away.

    metrics, each a (sum, count) pair over valid tokens:
      clip_frac       tokens where the clipped term is the active one;
      dual_clip_frac  tokens where the dual-clip bound is active;
      ratio_mean      r;
      approx_kl       k3 estimate of KL(π_old‖π_θ) = r − 1 − log r.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    valid_bt = mask_bt > 0
    log_ratio_bt = jnp.where(
        valid_bt, logp_bt.astype(jnp.float32) - old_logp_bt.astype(jnp.float32), 0.0
    )
    log_ratio_bt = jnp.clip(log_ratio_bt, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio_bt = jnp.exp(log_ratio_bt)
    adv = adv_b.astype(jnp.float32)
    adv_bt = jnp.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, ratio_bt.shape)
    adv_bt = jnp.where(valid_bt, adv_bt, 0.0)

    unclipped_bt = -adv_bt * ratio_bt
    loss_bt = unclipped_bt
    clipped_active_bt = jnp.zeros(ratio_bt.shape, bool)
    if clip:
        clipped_bt = -adv_bt * jnp.clip(ratio_bt, 1.0 - clip_low, 1.0 + clip_high)
        clipped_active_bt = clipped_bt > unclipped_bt
        loss_bt = jnp.maximum(unclipped_bt, clipped_bt)
    dual_active_bt = jnp.zeros(ratio_bt.shape, bool)
    if dual_clip is not None:
        bound_bt = -dual_clip * adv_bt
        dual_active_bt = (adv_bt < 0) & (loss_bt > bound_bt)
        loss_bt = jnp.where(dual_active_bt, bound_bt, loss_bt)

    num, den = aggregate(loss_bt, mask_bt, aggregation, seq_len_norm=seq_len_norm)

    ratio_sg = jax.lax.stop_gradient(ratio_bt)
    log_ratio_sg = jax.lax.stop_gradient(log_ratio_bt)
    count = jnp.sum(mask_bt.astype(jnp.float32))
    metrics = {
        "clip_frac": (jnp.sum(masked(clipped_active_bt, mask_bt)), count),
        "dual_clip_frac": (jnp.sum(masked(dual_active_bt, mask_bt)), count),
        "ratio_mean": (jnp.sum(masked(ratio_sg, mask_bt)), count),
        "approx_kl": (jnp.sum(masked(ratio_sg - 1.0 - log_ratio_sg, mask_bt)), count),
    }
    return num, den, metrics


def entropy_bonus(
    entropy_bt: jax.Array,
    mask_bt: jax.Array,
    coef: float = 0.0,
    aggregation: str = "token_mean",
) -> Pair:
    """Entropy bonus as a loss term (numerator, denominator).

        num/den = −coef · aggregate(H_t)

    Adding it to the loss raises entropy. The recipe uses coef = 0 throughout,
    in which case the caller can skip computing entropies altogether.
    """
    num, den = aggregate(entropy_bt, mask_bt, aggregation)
    return -coef * num, den
