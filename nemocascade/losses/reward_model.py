"""Bradley–Terry reward-model loss on (chosen, rejected) score pairs."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def bradley_terry_loss(
    r_chosen_b: jax.Array,
    r_rejected_b: jax.Array,
    *,
    margin: float | jax.Array = 0.0,
    mask_b: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, dict[str, tuple[jax.Array, jax.Array]]]:
    """Pairwise logistic loss as (numerator, denominator, metrics).

        ℓ_b = −log σ(r⁺_b − r⁻_b − m_b)
        num = Σ_b mask_b · ℓ_b,   den = Σ_b mask_b

    `margin` m is a scalar or per-pair [B] (e.g. a preference-strength margin
    as in Llama 2; 0 gives plain Bradley–Terry as in Nemotron-Cascade).
    −log σ(x) is `-jax.nn.log_sigmoid(x)`, finite for any |x|;
    ∂ℓ/∂r⁺ = −σ(−(Δ − m)), so at Δ − m = 0 the loss is log 2 and the
    gradients are ∓½. `mask_b` (default all ones) drops padding pairs.

    metrics, each a (sum, count) pair over valid pairs:
      accuracy  1[r⁺ > r⁻] (ties count as wrong; margin not applied);
      delta     r⁺ − r⁻.
    """
    r_c = r_chosen_b.astype(jnp.float32)
    r_r = r_rejected_b.astype(jnp.float32)
    m_b = jnp.ones_like(r_c) if mask_b is None else mask_b.astype(jnp.float32)
    valid_b = m_b > 0
    delta_b = jnp.where(valid_b, r_c - r_r, 0.0)
    loss_b = -jax.nn.log_sigmoid(delta_b - jnp.asarray(margin, jnp.float32))
    count = jnp.sum(m_b)
    delta_sg = jax.lax.stop_gradient(delta_b)
    metrics = {
        "accuracy": (jnp.sum(jnp.where(valid_b & (delta_sg > 0), m_b, 0.0)), count),
        "delta": (jnp.sum(jnp.where(valid_b, delta_sg * m_b, 0.0)), count),
    }
    return jnp.sum(jnp.where(valid_b, loss_b * m_b, 0.0)), count, metrics
