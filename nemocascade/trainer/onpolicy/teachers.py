"""Frozen MOPD teachers: forward-only log-probs of the student's sampled tokens.

Each domain maps to a teacher directory (a finished stage or an export); a
directory named by several domains is loaded once. Params are restored
straight into the student's sharded layout on the same mesh (the teachers
share the student's architecture and tokenizer, C2 §4.4), and every sampled
row is scored by its domain's teacher in one pass of the frozen-model scorer
(`onpolicy/frozen.py`, which also serves the RL stage's KL reference).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from nemocascade import checkpointing
from nemocascade.model import presets
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer.onpolicy import frozen


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
        params = [checkpointing.load_params(d, abstract_params) for d in unique]
        self._index = {domain: unique.index(d) for domain, d in dirs.items()}
        self.dirs = dict(dirs)
        self._scorer = frozen.FrozenScorer(
            model_cfg, params, mesh=mesh, rules=rules, implementation=implementation
        )

    @property
    def num_loaded(self) -> int:
        return self._scorer.num_models

    def logprobs(
        self, batch: Mapping[str, np.ndarray], row_domains: Sequence[str], temperature: float
    ) -> np.ndarray:
        """log π_teacher(targets) of each row under its domain's teacher."""
        missing = sorted(set(row_domains) - set(self._index))
        if missing:
            raise KeyError(f"no teacher for domain(s) {missing}; teachers: {sorted(self._index)}")
        route = np.asarray([self._index[d] for d in row_domains], np.int64)
        return self._scorer.logprobs(batch, temperature, route)
