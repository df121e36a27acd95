"""Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2 §4.4).

The student samples y from the inference engine (π_inf, the sampler); a teacher
of the sample's domain scores the same tokens; the student's training engine
(π_train) recomputes its log-probs with gradient. Only sampled tokens are used,
never the full vocabulary: the per-token advantage is the reverse-KL signal
log π_teacher − log π_train, with no group baseline.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nemocascade.losses import policy


def mopd_loss(
    logp_bt: jax.Array,
    teacher_logp_bt: jax.Array,
    sampler_logp_bt: jax.Array,
    mask_bt: jax.Array,
    *,
    ratio_low: float = 0.5,
    ratio_high: float = 2.0,
) -> tuple[jax.Array, jax.Array, dict[str, tuple[jax.Array, jax.Array]]]:
    """MOPD loss as (numerator, denominator, metrics).

    With ρ_t = π_train(y_t)/π_inf(y_t) and V(y) the valid tokens of sequence y:

        a_t = sg(log π_teacher(y_t) − log π_train(y_t))
        w_t = sg(ρ_t) · 1[ratio_low ≤ ρ_t ≤ ratio_high]
        L   = −mean_y (1/|V(y)|) Σ_{t∈V(y)} w_t · a_t · log π_train(y_t)

    so ∇L = −mean_y (1/|V(y)|) Σ_t w_t a_t ∇log π_train(y_t). The gate is hard
    (IcePop-style): tokens outside the band get weight 0 rather than a clipped
    weight. num = Σ_y of the per-sequence terms, den = number of sequences
    with at least one valid token. A sequence whose valid tokens are all gated
    still counts in den (its term is 0): the gate removes unreliable tokens,
    not samples, and letting den depend on the gate would make each step's
    scale depend on sampler/trainer mismatch.

    metrics, each a (sum, count) pair over valid tokens:
      gated_frac      tokens outside [ratio_low, ratio_high];
      advantage_mean  a_t, the teacher − student log-prob gap (→ 0 as the
                      student matches the teacher).
    """
    if not 0.0 <= ratio_low <= 1.0 <= ratio_high:
        raise ValueError(f"need 0 ≤ ratio_low ≤ 1 ≤ ratio_high, got {ratio_low}, {ratio_high}")
    valid_bt = mask_bt > 0
    logp = jnp.where(valid_bt, logp_bt.astype(jnp.float32), 0.0)
    teacher = jnp.where(valid_bt, teacher_logp_bt.astype(jnp.float32), 0.0)
    sampler = jnp.where(valid_bt, sampler_logp_bt.astype(jnp.float32), 0.0)

    ratio_bt = jax.lax.stop_gradient(jnp.exp(logp - sampler))
    keep_bt = (ratio_bt >= ratio_low) & (ratio_bt <= ratio_high)
    w_bt = jnp.where(keep_bt, ratio_bt, 0.0)
    adv_bt = jax.lax.stop_gradient(teacher - logp)

    num, den = policy.aggregate(-w_bt * adv_bt * logp, mask_bt, "seq_mean_token_mean")
    count = jnp.sum(mask_bt.astype(jnp.float32))
    metrics = {
        "gated_frac": (jnp.sum(policy.masked(~keep_bt, mask_bt)), count),
        "advantage_mean": (jnp.sum(policy.masked(adv_bt, mask_bt)), count),
    }
    return num, den, metrics
