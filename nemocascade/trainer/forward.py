"""Model forward → per-token log-probs of given targets (shared by every stage).

The trainer, the RL stage (policy, reference) and distillation (teachers) all
call `sequence_logprobs`, so there is one definition of "the model's log-prob
of a token", which the sampler's log-probs are tested against. On a
multi-device mesh the fused kernel runs in its `shard_map` form
(`kernels/fused_logprob/sharded.py`): tokens over the batch axes and the
vocabulary over the axis the logical rules give `act_vocab`.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax

from nemocascade.kernels.fused_logprob import api as logprob_api, sharded as logprob_sharded
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
    axes = _mesh_axes(hidden.shape[0], cfg.vocab_size, implementation)
    if axes is not None:
        b, t, d = hidden.shape
        logp, ent = logprob_sharded.token_logprobs(
            hidden.reshape(b * t, d),
            transformer.unembedding(params, cfg).astype(hidden.dtype),
            batch["targets"].reshape(b * t),
            mesh=jax.sharding.get_abstract_mesh(),
            batch_axes=axes[0],
            vocab_axis=axes[1],
            temperature=temperature,
            implementation=implementation or logprob_api.default_implementation(),
            compute_entropy=compute_entropy,
        )
        return logp.reshape(b, t), ent.reshape(b, t)
    return logprobs_lib.token_logprobs(
        hidden,
        transformer.unembedding(params, cfg),
        batch["targets"],
        temperature=temperature,
        implementation=implementation or None,
        compute_entropy=compute_entropy,
    )


def _mesh_axes(batch: int, vocab: int, implementation: str | None):
    """(batch axes, vocab axis) of the sharded log-prob, or None for the plain call.

    None off a multi-device mesh, for the materialized "reference", without
    logical rules that shard batch or vocabulary, or when the shapes do not divide.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1 or implementation == "reference":
        return None
    batch_axes = nn.logical_to_mesh_axes(("act_batch",))[0]
    vocab_axis = nn.logical_to_mesh_axes(("act_vocab",))[0]
    if batch_axes is None and vocab_axis is None:
        return None
    if isinstance(vocab_axis, tuple):  # the kernel takes one vocabulary axis
        vocab_axis = vocab_axis[0] if len(vocab_axis) == 1 else None

    def size(axes):
        axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
        return math.prod(mesh.shape[a] for a in axes)

    if batch % size(batch_axes) or vocab % size(vocab_axis):
        return None
    return batch_axes, vocab_axis
