"""Frozen models' log-probs of sampled tokens: the KL reference and the MOPD teachers.

One scorer serves both: a list of frozen param trees of the student's
architecture, in the student's sharded layout on the same mesh, and one
jitted forward (params are an argument, not a constant, so every tree shares
the compile). Each row is routed to one tree; the rows of a tree are
gathered, padded to a power-of-two bucket (times the batch shards of one
process, `sharding/hosts.py`) so only a handful of shapes compile, scored and
scattered back. The KL reference is the one-tree case: the stage's starting
params, copied so that they survive the donation of the train state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from nemocascade.model import presets
from nemocascade.rollout import rows as rows_lib
from nemocascade.sharding import hosts, rules as rules_lib
from nemocascade.trainer import forward


class FrozenScorer:
    """`logprobs(batch, temperature, route)` → log π_k(targets) per row, [N, T] float32."""

    def __init__(
        self,
        model_cfg: presets.ModelConfig,
        params: Sequence[Any],
        *,
        mesh: jax.sharding.Mesh,
        rules: rules_lib.Rules,
        implementation: str | None = None,
    ):
        self._params = list(params)
        self._mesh, self._rules = mesh, rules
        self._multiple = hosts.local_batch_shards(mesh, rules)

        def logprobs(p, batch, temperature):
            with nn.logical_axis_rules(rules):
                logp, _ = forward.sequence_logprobs(
                    p, model_cfg, batch, temperature=temperature, implementation=implementation
                )
            return jax.lax.stop_gradient(logp)

        self._fn = jax.jit(logprobs, static_argnums=2)

    @classmethod
    def reference(cls, model_cfg, params, *, mesh, rules, implementation=None) -> FrozenScorer:
        """The stage's starting policy, copied (the train state's buffers are donated)."""
        copied = jax.tree.map(lambda x: x.copy(), params)
        return cls(model_cfg, [copied], mesh=mesh, rules=rules, implementation=implementation)

    @property
    def num_models(self) -> int:
        return len(self._params)

    def logprobs(
        self,
        batch: Mapping[str, np.ndarray],
        temperature: float,
        route: np.ndarray | None = None,
    ) -> np.ndarray:
        """Row i scored by model `route[i]` (all by model 0 without a route)."""
        n = len(batch["targets"])
        route = np.zeros(n, np.int64) if route is None else np.asarray(route)
        out = np.zeros(np.shape(batch["targets"]), np.float32)
        for k, params in enumerate(self._params):
            rows = np.flatnonzero(route == k)
            count = hosts.max_over_processes(len(rows))
            if count == 0:
                continue
            size = hosts.pow2_bucket(count, self._multiple, cap=n)
            fill = np.full(size - len(rows), rows[0] if len(rows) else 0)
            index = np.concatenate([rows, fill]).astype(np.int64)
            sub = {key: np.asarray(batch[key])[index] for key in rows_lib.TOKEN_FIELDS}
            placed = rules_lib.put_batch(sub, self._mesh, self._rules)
            with jax.set_mesh(self._mesh):
                logp = self._fn(params, placed, temperature)
            out[rows] = hosts.local_rows(logp, self._mesh, self._rules)[: len(rows)]
        return out

    def close(self):
        self._params = []
