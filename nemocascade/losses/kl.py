"""Per-token estimators of KL(π_θ‖π_ref) from sampled-token log-probs, as a loss or in the reward.

Samples come from π_θ and only the log-probs of the sampled tokens are known,
so KL is estimated per token (Schulman, "Approximating KL divergence"). With
log r = log π_ref − log π_θ:

    k1 = −log r                 unbiased, can be negative
    k2 = ½ (log r)²             biased, ≥ 0, low variance
    k3 = r − 1 − log r          unbiased, ≥ 0, low variance

Used as loss terms their on-policy gradients differ: ∇k1 = ∇log π_θ has zero
mean; ∇k2 has mean ∇KL(π_θ‖π_ref); ∇k3 has mean ∇KL(π_ref‖π_θ). The recipe
uses no KL except C2 RLHF (coefficient 0.03, estimator unspecified).

Two constants keep the estimate finite when the policy drifts far from the
reference (as verl does): log r is clipped to ±`LOG_RATIO_CLAMP` = 10 before
any estimator, and k3 itself to ±`K3_BOUND` = 10 after it is computed — without
the bound a log-ratio of 10 alone gives e¹⁰ − 11 ≈ 22,015 per token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nemocascade.losses import policy

KINDS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 10.0
K3_BOUND = 10.0


def kl_estimate(
    logp_bt: jax.Array,
    ref_logp_bt: jax.Array,
    *,
    kind: str = "k3",
    clamp: float | None = LOG_RATIO_CLAMP,
    bound: float | None = K3_BOUND,
) -> jax.Array:
    """Per-token KL(π_θ‖π_ref) estimate (float32, same shape as the inputs).

    The log-ratio log r = log π_ref − log π_θ is clipped to [−clamp, clamp]
    first (clamp=None disables), which keeps exp(log r) in k3 finite when the
    policy drifts far from the reference; k3 is then clipped to [−bound, bound]
    (bound=None disables; k1 and k2 are already bounded by the clamp). The
    gradient is 0 where either binds.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    log_r = ref_logp_bt.astype(jnp.float32) - logp_bt.astype(jnp.float32)
    if clamp is not None:
        log_r = jnp.clip(log_r, -clamp, clamp)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * jnp.square(log_r)
    k3 = jnp.exp(log_r) - log_r - 1.0
    return k3 if bound is None else jnp.clip(k3, -bound, bound)


def _valid_estimate(logp_bt, ref_logp_bt, mask_bt, kind, clamp):
    """kl_estimate with padding log-probs replaced by 0 first, so they may hold any value."""
    valid_bt = mask_bt > 0
    return kl_estimate(
        jnp.where(valid_bt, logp_bt, 0.0),
        jnp.where(valid_bt, ref_logp_bt, 0.0),
        kind=kind,
        clamp=clamp,
    )


def kl_penalty(
    logp_bt: jax.Array,
    ref_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    kind: str = "k3",
    aggregation: str = "token_mean",
    clamp: float | None = LOG_RATIO_CLAMP,
) -> tuple[jax.Array, jax.Array]:
    """KL as a loss term: (numerator, denominator) = aggregate(k_t, mask, aggregation).

    The caller scales the numerator by β before adding it to the policy loss.
    """
    kl_bt = _valid_estimate(logp_bt, ref_logp_bt, mask_bt, kind, clamp)
    return policy.aggregate(kl_bt, mask_bt, aggregation)


def kl_in_reward(
    rewards_b: jax.Array,
    logp_bt: jax.Array,
    ref_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    coef: float,
    kind: str = "k1",
    clamp: float | None = LOG_RATIO_CLAMP,
) -> tuple[jax.Array, jax.Array]:
    """Fold the sequence KL into the scalar reward (classic RLHF shaping).

        KL_b = sg(Σ_t m_{b,t} · k_{b,t}),     r'_b = r_b − coef · KL_b

    Returns (r'_b, KL_b), both float32 [B]. The KL is stop-gradient: it acts
    only through the advantages computed from r'. Default estimator k1, whose
    sequence sum is the unbiased log-likelihood ratio log π_θ(y)/π_ref(y).
    """
    kl_bt = _valid_estimate(logp_bt, ref_logp_bt, mask_bt, kind, clamp)
    kl_b = jax.lax.stop_gradient(jnp.sum(policy.masked(kl_bt, mask_bt), axis=-1))
    return rewards_b.astype(jnp.float32) - coef * kl_b, kl_b
