"""Frozen MOPD teachers: forward-only log-probs of the student's sampled tokens.

Each domain, or domain and mode (`config.parse_teachers`), maps to a teacher
directory (a finished stage or an export); a directory named by several keys
is loaded once. Params are restored
straight into the student's sharded layout on the same mesh (the teachers
share the student's architecture and tokenizer, C2 §4.4), and every sampled
row is scored by its domain's teacher in one pass of the frozen-model scorer
(`onpolicy/frozen.py`, which also serves the RL stage's KL reference): the
row's `domain/mode` teacher, else its domain's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from nemocascade import checkpointing, config as config_lib
from nemocascade.model import presets
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer.onpolicy import frozen


class Teachers:
    """{key: dir} → `logprobs(batch, keys(row_domains, row_modes), temperature)`, [N, T] float32."""

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
        self._index = {key: unique.index(d) for key, d in dirs.items()}
        self.dirs = dict(dirs)
        self._scorer = frozen.FrozenScorer(
            model_cfg, params, mesh=mesh, rules=rules, implementation=implementation
        )

    @property
    def num_loaded(self) -> int:
        return self._scorer.num_models

    def keys(self, row_domains: Sequence[str], row_modes: Sequence[str]) -> list[str]:
        """Each row's teacher key: its `domain/mode` entry, else its domain's; KeyError if none."""
        pairs = list(zip(row_domains, row_modes, strict=True))
        keys = [config_lib.teacher_key(self._index, d, m) for d, m in pairs]
        missing = sorted({f"{d}/{m}" for (d, m), k in zip(pairs, keys, strict=True) if k is None})
        if missing:
            raise KeyError(f"no teacher for {missing}; teachers: {sorted(self._index)}")
        return keys

    def logprobs(
        self, batch: Mapping[str, np.ndarray], row_keys: Sequence[str], temperature: float
    ) -> np.ndarray:
        """log π_teacher(targets) of each row under the teacher of its key (`keys`)."""
        route = np.asarray([self._index[k] for k in row_keys], np.int64)
        return self._scorer.logprobs(batch, temperature, route)
