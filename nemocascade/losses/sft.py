"""Supervised fine-tuning loss: next-token cross-entropy on assistant tokens."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cross_entropy(logp_bt: jax.Array, loss_mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Masked next-token cross-entropy as (numerator, denominator).

        loss = Σ_{b,t} −m_{b,t} · log π(y_{b,t}) / Σ_{b,t} m_{b,t}

    Returning the two sums separately keeps the token-mean exact over the
    global batch under micro-batching and across hosts: callers add
    numerators and denominators, then divide once.
    """
    mask = loss_mask_bt.astype(jnp.float32)
    return -jnp.sum(logp_bt.astype(jnp.float32) * mask), jnp.sum(mask)
