"""The RL batch schema: one sampled response per row, and what training adds to it.

`PolicyRows` is what the sampler hands the trainer (`groups.RolloutBatch.rows`):
host numpy arrays `[N, T]`, in the next-token layout every forward shares —
row i is one prompt + one sampled response, `targets[:, t]` the token after
`inputs[:, t]`:

  inputs, targets      int32   tokens (pads 0)
  positions            int32   RoPE positions (from the first real token)
  segment_ids          int32   1 on real tokens, 0 on pads (attention never crosses)
  loss_mask            int32   1 on sampled completion tokens only (not the
                               prompt, pads or tokens forced by a thinking budget)
  sampler_logprobs     float32 the sampler's log-prob of each target

It is frozen: nothing is added to it in flight. A stage builds the dict the
jitted train step takes with `train_batch(rows, **extra)`, where `extra` is a
subset of `EXTRA_FIELDS`, each checked for name and shape:

  advantages           float32 [N]     GRPO group advantages (rl)
  ref_logprobs         float32 [N, T]  the KL reference's log-probs (rl, kl_coef > 0)
  teacher_logprobs     float32 [N, T]  the routed MOPD teacher's log-probs (distill)

Frozen-model scorers (KL reference, teachers, the sampler/trainer agreement
checks) read `rows.tokens()`, the four `TOKEN_FIELDS` a forward needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import numpy as np

TOKEN_FIELDS = ("inputs", "targets", "positions", "segment_ids")
EXTRA_FIELDS = {"advantages": 1, "ref_logprobs": 2, "teacher_logprobs": 2}  # name -> ndim


@dataclasses.dataclass(frozen=True)
class PolicyRows(Mapping):
    """Sampled rows `[N, T]` (read-only mapping access by field name, too)."""

    inputs: np.ndarray
    targets: np.ndarray
    positions: np.ndarray
    segment_ids: np.ndarray
    loss_mask: np.ndarray
    sampler_logprobs: np.ndarray

    def __post_init__(self):
        shape = np.shape(self.inputs)
        for f in dataclasses.fields(self):
            if np.shape(getattr(self, f.name)) != shape:
                raise ValueError(
                    f"PolicyRows.{f.name} has shape {np.shape(getattr(self, f.name))}, "
                    f"inputs {shape}"
                )

    # Mapping: `rows["loss_mask"]`, `dict(rows)`, `{**rows}`.
    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @property
    def num_rows(self) -> int:
        return int(np.shape(self.inputs)[0])

    def tokens(self) -> dict[str, np.ndarray]:
        """The forward's inputs (`TOKEN_FIELDS`)."""
        return {k: getattr(self, k) for k in TOKEN_FIELDS}

    def replace(self, **changes: np.ndarray) -> PolicyRows:
        return dataclasses.replace(self, **changes)


def train_batch(rows: PolicyRows, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """The train step's batch: every field of `rows` plus checked `EXTRA_FIELDS`."""
    out = dict(rows)
    n, t = np.shape(rows.inputs)
    for name, value in extra.items():
        if name not in EXTRA_FIELDS:
            raise KeyError(f"unknown train-batch field {name!r}; known: {sorted(EXTRA_FIELDS)}")
        want = (n,) if EXTRA_FIELDS[name] == 1 else (n, t)
        if np.shape(value) != want:
            raise ValueError(f"train-batch field {name!r} has shape {np.shape(value)}, want {want}")
        out[name] = np.asarray(value, np.float32)
    return out
