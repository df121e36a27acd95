"""Per-token log-prob and entropy from hidden states and the unembedding.

    logp, entropy = token_logprobs(hidden_nd, w_dv, targets_n, temperature=T)

is `log_softmax(hidden @ w / T)[n, target_n]` and `−Σ p log p`, float32, computed
without materializing `[N, V]` logits except by the "reference" implementation.
Gradients w.r.t. `hidden` and `w` flow through both outputs (custom VJP: the
residuals are per-token `lse` and `entropy`; the backward recomputes logits
tile by tile with `chunked_xla.backward`, whatever the forward implementation).
Masking tokens is the caller's job: multiply the outputs by a mask and the
masked tokens' gradients are exactly zero.

Implementations ("reference", "chunked_xla", "pallas_tpu", "pallas_gpu"); the
default follows `jax.default_backend()`: cpu → chunked_xla, tpu → pallas_tpu,
gpu → pallas_gpu. `pallas_gpu` has been compiled and timed on an H200
(docs/kernels.md); `pallas_tpu` has only run in interpret mode on CPU.
`interpret=None` turns interpret mode on exactly when the backend is CPU.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from nemocascade.kernels.fused_logprob import (
    chunked_xla,
    online_softmax,
    pallas_gpu,
    pallas_tpu,
    reference,
)

IMPLEMENTATIONS = ("reference", "chunked_xla", "pallas_tpu", "pallas_gpu")
_DEFAULT_BY_BACKEND = {"cpu": "chunked_xla", "tpu": "pallas_tpu", "gpu": "pallas_gpu"}


def default_implementation() -> str:
    """The implementation used when none is named, from `jax.default_backend()`."""
    return _DEFAULT_BY_BACKEND.get(jax.default_backend(), "chunked_xla")


def partial_stats_fn(
    implementation: str,
    *,
    temperature: float,
    token_block: int | None,
    vocab_block: int | None,
    interpret: bool | None,
) -> Callable[..., online_softmax.Partial]:
    """`f(hidden, w, targets, num_valid) -> Partial` for a fused implementation."""
    if implementation == "chunked_xla":
        return functools.partial(
            chunked_xla.partial_stats,
            temperature=temperature,
            token_block=token_block,
            vocab_block=vocab_block,
        )
    if implementation in ("pallas_tpu", "pallas_gpu"):
        module = pallas_tpu if implementation == "pallas_tpu" else pallas_gpu
        return functools.partial(
            module.partial_stats,
            temperature=temperature,
            block_tokens=token_block or module.DEFAULT_BLOCK_TOKENS,
            block_vocab=vocab_block or module.DEFAULT_BLOCK_VOCAB,
            interpret=jax.default_backend() == "cpu" if interpret is None else interpret,
        )
    raise ValueError(
        f"Unknown fused log-prob implementation {implementation!r}; "
        f"expected one of {IMPLEMENTATIONS}."
    )


@dataclasses.dataclass(frozen=True)
class _Static:
    """Non-differentiable configuration of one call (hashable)."""

    partial_stats: Callable[..., online_softmax.Partial]
    num_valid: int
    temperature: float
    compute_entropy: bool
    token_block: int | None
    vocab_block: int | None


def _forward(hidden, w, targets, static: _Static):
    p = static.partial_stats(hidden, w, targets, static.num_valid)
    return online_softmax.finalize(p)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _fused(hidden, w, targets, static: _Static):
    logp, entropy, _ = _forward(hidden, w, targets, static)
    return logp, entropy


def _fused_fwd(hidden, w, targets, static: _Static):
    logp, entropy, lse = _forward(hidden, w, targets, static)
    return (logp, entropy), (hidden, w, targets, lse, entropy)


def _fused_bwd(static: _Static, residuals, cotangents):
    hidden, w, targets, lse, entropy = residuals
    g_logp, g_entropy = cotangents
    dh, dw = chunked_xla.backward(
        hidden,
        w,
        targets,
        static.num_valid,
        lse,
        entropy if static.compute_entropy else None,
        g_logp,
        g_entropy if static.compute_entropy else None,
        temperature=static.temperature,
        token_block=static.token_block,
        vocab_block=static.vocab_block,
    )
    return dh.astype(hidden.dtype), dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def token_logprobs(
    hidden_nd: jax.Array,
    w_unembed_dv: jax.Array,
    targets_n: jax.Array,
    *,
    temperature: float = 1.0,
    valid_vocab: int | None = None,
    compute_entropy: bool = True,
    forward_only: bool = False,
    implementation: str | None = None,
    interpret: bool | None = None,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """log p(target) and entropy per token, both float32 with `targets_n`'s shape.

    Args:
      hidden_nd: `[..., D]` final hidden states, bf16 or f32 (leading dims are
        flattened to tokens).
      w_unembed_dv: `[D, V]` unembedding; `V` may include padding columns.
      targets_n: `[...]` integer token ids, `< valid_vocab`.
      temperature: static Python float; logits are divided by it.
      valid_vocab: columns `≥ valid_vocab` are excluded from the softmax
        (None: all `V`).
      compute_entropy: if False the entropy output is zeros and is not
        differentiated (cheaper backward).
      forward_only: no custom VJP and no residuals, inputs under
        `stop_gradient` (reference/teacher log-probs).
      implementation: one of `IMPLEMENTATIONS`; None picks by backend.
      interpret: Pallas interpret mode; None means "on CPU only".
      token_block, vocab_block: tile sizes (implementation defaults if None).
    """
    *lead, d = hidden_nd.shape
    vocab = w_unembed_dv.shape[1]
    if w_unembed_dv.shape[0] != d:
        raise ValueError(f"hidden has D={d} but the unembedding is {w_unembed_dv.shape}.")
    if tuple(targets_n.shape) != tuple(lead):
        raise ValueError(f"targets shape {targets_n.shape} != hidden leading dims {lead}.")
    valid_vocab = vocab if valid_vocab is None else int(valid_vocab)
    if not 1 <= valid_vocab <= vocab:
        raise ValueError(f"valid_vocab={valid_vocab} must be in [1, {vocab}].")
    implementation = implementation or default_implementation()
    hidden = hidden_nd.reshape(-1, d)
    targets = targets_n.reshape(-1)
    if forward_only:
        hidden, w_unembed_dv = jax.lax.stop_gradient((hidden, w_unembed_dv))

    if implementation == "reference":
        logp, entropy = reference.token_logprobs(
            hidden,
            w_unembed_dv,
            targets,
            temperature=temperature,
            valid_vocab=valid_vocab,
            compute_entropy=compute_entropy,
        )
    else:
        static = _Static(
            partial_stats_fn(
                implementation,
                temperature=float(temperature),
                token_block=token_block,
                vocab_block=vocab_block,
                interpret=interpret,
            ),
            valid_vocab,
            float(temperature),
            compute_entropy,
            token_block,
            vocab_block,
        )
        if forward_only:
            logp, entropy, _ = _forward(hidden, w_unembed_dv, targets, static)
        else:
            logp, entropy = _fused(hidden, w_unembed_dv, targets, static)
        if not compute_entropy:
            entropy = jnp.zeros_like(logp)
    return logp.reshape(lead), entropy.reshape(lead)
