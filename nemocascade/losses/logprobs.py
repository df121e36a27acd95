"""Per-token log-probs and entropy of a model's own tokens, via the fused kernel.

This is the only path from hidden states to token probabilities in training:
it flattens `[B, T, D]` to tokens and calls `nemocascade.kernels.fused_logprob.api`, which
never materializes `[tokens, vocab]` logits on the chunked/Pallas paths.
"""

from __future__ import annotations

import jax

from nemocascade.kernels.fused_logprob import api


def token_logprobs(
    hidden_btd: jax.Array,
    w_dv: jax.Array,
    targets_bt: jax.Array,
    *,
    temperature: float = 1.0,
    implementation: str | None = None,
    compute_entropy: bool = True,
    valid_vocab: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """log π(target_t | prefix) and the entropy H_t of π(·|prefix), both float32 [B, T]."""
    b, t, d = hidden_btd.shape
    logp_n, ent_n = api.token_logprobs(
        hidden_btd.reshape(b * t, d),
        w_dv.astype(hidden_btd.dtype),
        targets_bt.reshape(b * t),
        temperature=temperature,
        implementation=implementation,
        compute_entropy=compute_entropy,
        valid_vocab=valid_vocab,
    )
    return logp_n.reshape(b, t), ent_n.reshape(b, t)
