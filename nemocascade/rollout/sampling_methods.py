"""Sampling methods: small frozen dataclasses and one pure function over `[B, V]` logits.

`choose(logits_bv, method, rng)` returns the next token of every row and its
log-prob under the distribution actually sampled from. `rng` is one key for the
whole batch or one key per row (`row_keys`): with per-row keys a row's draw
depends only on its own key, not on the batch it shares a step with, which is
what lets the static and the continuous engines agree token for token.

* `Greedy()`: the argmax; its log-prob is the temperature-1 log-softmax.
* `Sample(temperature, top_k, top_p)`: logits are divided by the temperature,
  then truncated to the `top_k` most likely tokens (0 = all), then to the
  smallest prefix of those (by decreasing probability) whose renormalized mass
  reaches `top_p` (1.0 = all), as Hugging Face and vLLM order them. The
  log-prob is taken under the renormalized truncated distribution, so without
  truncation it equals `log_softmax(logits / temperature)[token]`, which is
  what the trainer's `forward.sequence_logprobs(..., temperature=T)` computes.

The sampler forms logits for the current position only (`[B, V]`, the one
exception to "only the fused kernel forms logits"); nothing here sees `[B, T, V]`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class Greedy:
    """Argmax decoding (evaluation pass@1)."""


@dataclasses.dataclass(frozen=True)
class Sample:
    """Ancestral sampling with temperature, top-k and top-p (nucleus) truncation.

    Attributes:
      temperature: logits are divided by it; must be > 0 (use `Greedy` for 0).
      top_k: keep the k most likely tokens; 0 keeps all.
      top_p: keep the smallest most-likely set with mass >= top_p; 1.0 keeps all.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"Sample.temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"Sample.top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"Sample.top_p must be in (0, 1], got {self.top_p}")

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0


Method = Greedy | Sample


def temperature_of(method: Method) -> float:
    """The temperature whose log-softmax the trainer reproduces (1.0 for greedy)."""
    return method.temperature if isinstance(method, Sample) else 1.0


def _truncated_sorted(scaled_bv: jax.Array, method: Sample) -> tuple[jax.Array, jax.Array]:
    """(log-probs [B, k] of the truncated, renormalized distribution, their token ids).

    Entries are sorted by decreasing probability; truncated-away entries are -inf.
    """
    vocab = scaled_bv.shape[-1]
    k = method.top_k if 0 < method.top_k < vocab else vocab
    vals_bk, ids_bk = jax.lax.top_k(scaled_bv, k)
    logp_bk = jax.nn.log_softmax(vals_bk, axis=-1)
    if method.top_p < 1.0:
        # Keep entry i iff the mass strictly before it is < top_p: the smallest
        # prefix reaching top_p (the most likely token always survives).
        probs_bk = jnp.exp(logp_bk)
        mass_before = jnp.cumsum(probs_bk, axis=-1) - probs_bk
        keep = mass_before < method.top_p
        logp_bk = jax.nn.log_softmax(jnp.where(keep, logp_bk, _NEG_INF), axis=-1)
    return logp_bk, ids_bk


def row_keys(rng: jax.Array, request_b: jax.Array, step_b: jax.Array) -> jax.Array:
    """One key per row, from (request index, completion index) only: `[B]` keys."""
    return jax.vmap(lambda r, s: jax.random.fold_in(jax.random.fold_in(rng, r), s))(
        request_b, step_b
    )


def _draw(rng: jax.Array, logp_bk: jax.Array) -> jax.Array:
    """One index per row from normalized log-probs `[B, K]`, by the inverse CDF.

    One uniform per row picks the first entry whose running mass reaches it
    (`cumsum` in float32, scaled by the row's total so rounding cannot leave
    the last entry unreachable). It draws one number per row where a Gumbel
    race draws `K` and takes two logs of each (at batch 128 x 1,024 entries
    on XLA:CPU: 0.4 vs 2.0 ms per decode step, docs/benchmarks.md). Each
    entry's share of `[0, 1)` is exact up to the float32 rounding of one
    addition, <= 2^-24 absolute, as in FlashInfer's and torch's samplers; an
    entry of probability 0 is never drawn (the uniform lies in (0, 1]).
    """
    if jnp.ndim(rng) == 0:
        u_b = jax.random.uniform(rng, logp_bk.shape[:1])
    else:
        u_b = jax.vmap(lambda k: jax.random.uniform(k, ()))(rng)
    cdf_bk = jnp.cumsum(jnp.exp(logp_bk), axis=-1)
    target_b = (1.0 - u_b) * cdf_bk[:, -1]
    index_b = jnp.sum(cdf_bk < target_b[:, None], axis=-1, dtype=jnp.int32)
    return jnp.minimum(index_b, logp_bk.shape[-1] - 1)


def choose(logits_bv: jax.Array, method: Method, rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Next tokens int32 [B] and their log-probs float32 [B] under `method`.

    `rng`: one key, or `[B]` keys (one per row).
    """
    logits_bv = logits_bv.astype(jnp.float32)
    if isinstance(method, Greedy):
        tokens_b = jnp.argmax(logits_bv, axis=-1).astype(jnp.int32)
        return tokens_b, _gather(jax.nn.log_softmax(logits_bv, axis=-1), tokens_b)
    scaled_bv = logits_bv / method.temperature
    if not method.truncates:
        # No sort needed: sample straight from the full distribution.
        logp_bv = jax.nn.log_softmax(scaled_bv, axis=-1)
        tokens_b = _draw(rng, logp_bv)
        return tokens_b, _gather(logp_bv, tokens_b)
    logp_bk, ids_bk = _truncated_sorted(scaled_bv, method)
    choice_b = _draw(rng, logp_bk)
    return _gather(ids_bk, choice_b).astype(jnp.int32), _gather(logp_bk, choice_b)


def logprob_of(logits_bv: jax.Array, tokens_b: jax.Array, method: Method) -> jax.Array:
    """log-softmax at the method's temperature (untruncated) of given tokens, float32 [B].

    Used for tokens the sampler forces (the think-close sequence), which need
    not lie inside the truncated set.
    """
    scaled_bv = logits_bv.astype(jnp.float32) / temperature_of(method)
    return _gather(jax.nn.log_softmax(scaled_bv, axis=-1), tokens_b)


def _gather(x_bv: jax.Array, idx_b: jax.Array) -> jax.Array:
    return jnp.take_along_axis(x_bv, idx_b[:, None].astype(jnp.int32), axis=-1)[:, 0]
