"""Verifier reward with a reward-model bonus (C1 §4.4, IF-RL of thinking models).

    r_i = R(o_i) + sigmoid(z_i)   if R(o_i) = 1,   else 0

R is the domain's verifier (all instructions hold), z_i the reward model's
score of rollout i z-normalized within its group (the rollouts of one prompt;
z = 0 where the group's scores do not vary). A rule-only IF reward pays full
marks to a poor answer that meets the constraints; the bonus ranks the
passing answers by quality. On with `rl.rm_bonus=True` (reward model from
`rl.rm_from`, as in RLHF).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nemocascade.rollout import groups
from nemocascade.tasks import base as tasks_base


def combine(verifier_n: np.ndarray, rm_n: np.ndarray, group_n: np.ndarray) -> np.ndarray:
    """The formula above, float32 [N]; `group_n` gives each rollout's group id."""
    verifier_n, rm_n = np.asarray(verifier_n, np.float64), np.asarray(rm_n, np.float64)
    z_n = np.zeros_like(rm_n)
    for g in np.unique(group_n):
        rows = group_n == g
        std = rm_n[rows].std()
        if std > 0:
            z_n[rows] = (rm_n[rows] - rm_n[rows].mean()) / std
    bonus_n = 1.0 / (1.0 + np.exp(-z_n))
    return np.where(verifier_n >= 1.0, verifier_n + bonus_n, 0.0).astype(np.float32)


class RMBonusRewarder:
    """`rewarder(examples, rollouts)`: a verifier rewarder plus the RM bonus."""

    def __init__(self, verifier_rewarder, rm_rewarder):
        self._verifier, self._rm = verifier_rewarder, rm_rewarder

    def __call__(
        self, examples: Sequence[tasks_base.Example], rollouts: groups.RolloutBatch
    ) -> np.ndarray:
        verifier_n = self._verifier(examples, rollouts)
        rm_n = self._rm(examples, rollouts)
        return combine(verifier_n, rm_n, np.asarray(rollouts.example_index))

    def close(self):
        self._verifier.close()
        self._rm.close()
