"""Online-softmax statistics shared by every fused log-prob implementation.

A block of scaled logits `z` (rows = tokens, columns = a slice of the vocabulary)
is summarised per row by a `Partial`:

    m      = max_j z_j                      over valid columns (−inf if none)
    s      = Σ_j exp(z_j − m)
    t      = Σ_j (z_j − m) · exp(z_j − m)
    target = z_y if the target column y lies in the block, else 0

Partials of disjoint column sets merge exactly (`merge`, or `pmax`/`psum` across
devices in `sharded.py`), and the full-vocabulary partial gives

    lse = m + log s,   log p_y = target − lse,   H = −Σ p log p = log s − t / s.

Keeping `t` relative to the running max avoids the cancellation of
`H = lse − E_p[z]` when logits are large. The backward needs only `lse` and `H`:

    dlogits_j = g_logp · (1[j = y] − p_j) − g_H · p_j · (log p_j + H)

(∂H/∂z_j = −p_j (log p_j + H) since ∂ log p_k/∂z_j = 1[k = j] − p_j and Σ_k p_k = 1).

All functions here are plain `jnp` code on 2-D `[rows, cols]` tiles with
`keepdims` reductions, so the Pallas kernels call them inside their kernel
bodies and the XLA paths call them on chunks.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Partial(NamedTuple):
    """Per-row online-softmax statistics of a set of vocabulary columns (float32)."""

    m: jax.Array
    s: jax.Array
    t: jax.Array
    target: jax.Array


def empty(shape: tuple[int, ...]) -> Partial:
    """The identity of `merge`: statistics of an empty column set."""
    zeros = jnp.zeros(shape, jnp.float32)
    return Partial(jnp.full(shape, -jnp.inf, jnp.float32), zeros, zeros, zeros)


def tile_partial(z: jax.Array, valid: jax.Array, is_target: jax.Array) -> Partial:
    """Statistics of one `[rows, cols]` tile of float32 scaled logits.

    `valid` and `is_target` broadcast against `z`. Invalid entries may hold
    anything (edge blocks of Pallas kernels hold garbage or NaN): they only
    ever pass through the untaken side of a `where`.
    """
    z_valid = jnp.where(valid, z, -jnp.inf)
    m = jnp.max(z_valid, axis=-1, keepdims=True)
    # A row with no valid column keeps m = −inf but shifts by 0 so exp stays 0.
    m_shift = jnp.where(m > -jnp.inf, m, 0.0)
    e = jnp.exp(z_valid - m_shift)
    s = jnp.sum(e, axis=-1, keepdims=True)
    t = jnp.sum(jnp.where(valid, (z - m_shift) * e, 0.0), axis=-1, keepdims=True)
    target = jnp.sum(jnp.where(valid & is_target, z, 0.0), axis=-1, keepdims=True)
    return Partial(m, s, t, target)


def shift(p: Partial, m_new: jax.Array) -> Partial:
    """Re-expresses `p` relative to a larger running max `m_new` (m and target kept)."""
    m_new_safe = jnp.where(m_new > -jnp.inf, m_new, 0.0)
    scale = jnp.exp(p.m - m_new_safe)
    # Σ (z − m') e^{z−m'} = e^{m−m'} (t + (m − m') s); rows with s = 0 stay 0
    # (their m is −inf and the product would be NaN).
    t = jnp.where(p.s > 0, scale * (p.t + (p.m - m_new_safe) * p.s), 0.0)
    return Partial(m_new, p.s * scale, t, p.target)


def merge(a: Partial, b: Partial) -> Partial:
    """Statistics of the union of two disjoint column sets."""
    m = jnp.maximum(a.m, b.m)
    a, b = shift(a, m), shift(b, m)
    return Partial(m, a.s + b.s, a.t + b.t, a.target + b.target)


def merge_all(p: Partial, axis: int) -> Partial:
    """Merges partials stacked along `axis` (e.g. one per vocabulary block)."""
    m = jnp.max(p.m, axis=axis, keepdims=True)
    q = shift(p, m)
    return Partial(
        jnp.squeeze(m, axis),
        jnp.sum(q.s, axis=axis),
        jnp.sum(q.t, axis=axis),
        jnp.sum(p.target, axis=axis),
    )


def finalize(p: Partial) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(logp, entropy, lse) from the full-vocabulary statistics."""
    log_s = jnp.log(p.s)
    lse = p.m + log_s
    return p.target - lse, log_s - p.t / p.s, lse


def dlogits(
    z: jax.Array,
    valid: jax.Array,
    is_target: jax.Array,
    lse: jax.Array,
    entropy: jax.Array | None,
    g_logp: jax.Array,
    g_entropy: jax.Array | None,
) -> jax.Array:
    """Cotangent of the scaled logits of one tile; per-row arrays are `[rows, 1]`.

    `entropy`/`g_entropy` are None when entropy is not differentiated.
    """
    logp = jnp.where(valid, z - lse, -jnp.inf)
    p = jnp.exp(logp)
    d = g_logp * (jnp.where(valid & is_target, 1.0, 0.0) - p)
    if g_entropy is not None:
        d = d - g_entropy * jnp.where(valid, p * (logp + entropy), 0.0)
    return d
