"""Materialized-logits reference: the specification and test oracle.

    logits = (hidden @ w) / temperature          float32 accumulation
    logp_n = log_softmax(logits)[n, target_n]
    H_n    = −Σ_v p_nv log p_nv

Columns `v ≥ valid_vocab` (vocabulary padding) are excluded from the softmax.
Gradients come from plain JAX autodiff through the materialized `[N, V]`
logits, so this is the slow, memory-hungry, obviously-correct version.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_logprobs(
    hidden_nd: jax.Array,
    w_dv: jax.Array,
    targets_n: jax.Array,
    *,
    temperature: float = 1.0,
    valid_vocab: int | None = None,
    compute_entropy: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """(logp_n, entropy_n), float32; entropy is zeros when `compute_entropy` is False."""
    vocab = w_dv.shape[1]
    valid_vocab = vocab if valid_vocab is None else valid_vocab
    logits_nv = jnp.dot(hidden_nd, w_dv, preferred_element_type=jnp.float32) / temperature
    valid_v = jnp.arange(vocab) < valid_vocab
    logits_nv = jnp.where(valid_v, logits_nv, -jnp.inf)
    logp_nv = jax.nn.log_softmax(logits_nv, axis=-1)
    logp_n = jnp.take_along_axis(logp_nv, targets_n[:, None].astype(jnp.int32), axis=-1)[:, 0]
    if not compute_entropy:
        return logp_n, jnp.zeros_like(logp_n)
    # where() on log p (not on the product) keeps the masked columns' gradient finite.
    safe_logp_nv = jnp.where(valid_v, logp_nv, 0.0)
    entropy_n = -jnp.sum(jnp.exp(safe_logp_nv) * safe_logp_nv * valid_v, axis=-1)
    return logp_n, entropy_n
