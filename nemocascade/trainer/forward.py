"""Model forward → per-token log-probs of given targets (shared by every stage).

The trainer, the RL stage (policy, reference) and distillation (teachers) all
call `sequence_logprobs`, so there is one definition of "the model's log-prob
of a token", which the sampler's log-probs are tested against.
"""

from __future__ import annotations

from typing import Any

import jax

from nemocascade.losses import logprobs as logprobs_lib
from nemocascade.model import presets, transformer


def hidden_states(params: Any, cfg: presets.ModelConfig, batch: dict[str, jax.Array]):
    hidden, _ = transformer.Transformer(cfg).apply(
        {"params": params}, batch["inputs"], batch["positions"], batch["segment_ids"]
    )
    return hidden


def sequence_logprobs(
    params: Any,
    cfg: presets.ModelConfig,
    batch: dict[str, jax.Array],
    *,
    temperature: float = 1.0,
    implementation: str | None = None,
    compute_entropy: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """log π(targets | inputs) and entropy, float32 [B, T]."""
    hidden = hidden_states(params, cfg, batch)
    return logprobs_lib.token_logprobs(
        hidden,
        transformer.unembedding(params, cfg),
        batch["targets"],
        temperature=temperature,
        implementation=implementation or None,
        compute_entropy=compute_entropy,
    )
