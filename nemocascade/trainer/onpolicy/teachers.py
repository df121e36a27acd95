"""Frozen MOPD teachers: forward-only log-probs of the student's sampled tokens.

Each domain maps to a teacher directory (a finished stage or an export); a
directory named by several domains is loaded once. Params are restored
straight into the student's sharded layout on the same mesh (the teachers
share the student's architecture and tokenizer, C2 §4.4), and one jitted
forward serves every teacher, since params are an argument, not a constant.

Every sampled row is scored by exactly one teacher, in one pass: the rows
routed to a teacher are gathered, padded to a power-of-two bucket (times the
batch shards) so only a handful of shapes ever compile, scored, and
scattered back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from nemocascade import checkpointing
from nemocascade.model import presets
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward

SCORE_KEYS = ("inputs", "targets", "positions", "segment_ids")


def bucket_rows(count: int, multiple: int, total: int) -> int:
    """Rows to score `count` routed rows: `multiple`·2^k ≥ count, at most `total`.

    `total` (the whole batch) is always a valid shape, so the bucket never
    exceeds it; every bucket is a multiple of the batch shards.
    """
    rows = multiple
    while rows < count:
        rows *= 2
    return min(rows, total)


def _agreed_count(count: int) -> int:
    """The largest count over processes, so every process picks the same bucket."""
    if jax.process_count() == 1:
        return count
    from jax.experimental import multihost_utils

    return int(np.max(multihost_utils.process_allgather(np.asarray(count, np.int32))))


class Teachers:
    """{domain: dir} → `logprobs(batch, row_domains, temperature)`, [N, T] float32."""

    def __init__(
        self,
        model_cfg: presets.ModelConfig,
        dirs: Mapping[str, str],
        *,
        abstract_params: Any,
        mesh: jax.sharding.Mesh,
        rules: rules_lib.Rules,
        implementation: str | None = None,
    ):
        unique = sorted(set(dirs.values()))
        self._params = [checkpointing.load_params(d, abstract_params) for d in unique]
        self._index = {domain: unique.index(d) for domain, d in dirs.items()}
        self.dirs = dict(dirs)
        self._mesh, self._rules = mesh, rules
        self._multiple = max(1, rules_lib.batch_shards(mesh, rules) // jax.process_count())

        def logprobs(params, batch, temperature):
            with nn.logical_axis_rules(rules):
                logp, _ = forward.sequence_logprobs(
                    params, model_cfg, batch, temperature=temperature, implementation=implementation
                )
            return jax.lax.stop_gradient(logp)

        self._fn = jax.jit(logprobs, static_argnums=2)

    @property
    def num_loaded(self) -> int:
        return len(self._params)

    def logprobs(
        self, batch: Mapping[str, np.ndarray], row_domains: Sequence[str], temperature: float
    ) -> np.ndarray:
        """log π_teacher(targets) of each row under its domain's teacher (0 on no row)."""
        n = len(row_domains)
        missing = sorted(set(row_domains) - set(self._index))
        if missing:
            raise KeyError(f"no teacher for domain(s) {missing}; teachers: {sorted(self._index)}")
        routed = np.asarray([self._index[d] for d in row_domains])
        out = np.zeros(batch["targets"].shape, np.float32)
        for t, params in enumerate(self._params):
            rows = np.flatnonzero(routed == t)
            count = _agreed_count(len(rows))
            if count == 0:
                continue
            size = bucket_rows(count, self._multiple, n)
            fill = np.full(size - len(rows), rows[0] if len(rows) else 0)
            index = np.concatenate([rows, fill]).astype(np.int64)
            sub = {k: np.asarray(batch[k])[index] for k in SCORE_KEYS}
            placed = rules_lib.put_batch(sub, self._mesh, self._rules)
            with jax.set_mesh(self._mesh):
                logp = self._fn(params, placed, temperature)
            local = np.asarray(jax.device_get(_local_rows(logp)))
            out[rows] = local[: len(rows)]
        return out


def _local_rows(x: jax.Array):
    """This process's rows of a batch-sharded array (all of it on one process)."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return multihost_utils.global_array_to_host_local_array(x, x.sharding.mesh, x.sharding.spec)
