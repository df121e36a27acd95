"""Reward sources of an RL stage behind one call: `rewarder(examples, rollouts) -> scores [N]`.

* verifiers (RLVR stages): the domain's gold verifier scores the answer after
  `</think>` in a pool of worker processes (code runs in the sandbox);
* reward model (RLHF): see `nemocascade.trainer.onpolicy.rm_scoring`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nemocascade import config as config_lib
from nemocascade.rewards import pool as pool_lib, registry, sandbox, swe_patch
from nemocascade.rollout import groups
from nemocascade.tasks import base as tasks_base


class VerifierRewarder:
    """Scores every rollout with its example's verifier (or `rl.reward_fn` / `rl.reward`)."""

    def __init__(self, rl: config_lib.RLConfig):
        if rl.reward and rl.reward not in registry.names():
            raise config_lib.ConfigError(
                f"config.rl.reward={rl.reward!r}; choose from {registry.names()} or 'rm'"
            )
        self._fixed = rl.reward_fn or rl.reward or None  # a plug-in runs in the pool too
        self._pool = pool_lib.VerifierPool(
            num_workers=rl.verifier_workers, timeout_s=rl.verifier_timeout_s
        ).__enter__()

    def __call__(
        self, examples: Sequence[tasks_base.Example], rollouts: groups.RolloutBatch
    ) -> np.ndarray:
        rows = [examples[i] for i in rollouts.example_index]
        return self.score(rows, rollouts.completions)

    def score(self, rows: Sequence[tasks_base.Example], completions: Sequence[str]) -> np.ndarray:
        """Scores of completions, row i answering `rows[i]` (streaming verification scores
        the rows of a batch in pieces as they finish)."""
        rows = list(rows)
        names = [self._fixed or registry.name_for_domain(ex.domain) for ex in rows]
        results = self._pool.score(names, [ex.prompt for ex in rows], list(completions), rows)
        return np.asarray([r.score for r in results], np.float32)

    def close(self):
        self._pool.close()


def make(cfg: config_lib.Config, workdir: str, rt, tok, template):
    if cfg.rl.reward == "rm":
        from nemocascade.trainer.onpolicy import rm_scoring

        return rm_scoring.RMRewarder(cfg, workdir, rt, tok, template)
    # Before the pool spawns its workers (they inherit the choice); fails here,
    # with the install hint, when code must run (code rewards, the swe eval's
    # hidden tests) and bubblewrap does not work.
    swe_patch.configure(swe_patch.RewardOptions(cfg.rl.swe_shaping, cfg.rl.swe_judge))
    try:
        needed = bool({"code", "swe"} & set(cfg.rl.domains))
        backend = sandbox.configure(cfg.sandbox.backend, needed=needed)
    except sandbox.SandboxUnavailable as e:
        raise config_lib.ConfigError(f"config.sandbox.backend={cfg.sandbox.backend}: {e}") from None
    if backend == "rlimit":
        sandbox.note_weak_backend(f"{workdir.rstrip('/')}/{cfg.stage}")
    rewarder = VerifierRewarder(cfg.rl)
    if cfg.rl.rm_bonus:  # C1 §4.4: verifier reward + sigmoid(group-z RM score) where it passes
        from nemocascade.trainer.onpolicy import rm_bonus, rm_scoring

        rm = rm_scoring.RMRewarder(cfg, workdir, rt, tok, template)
        return rm_bonus.RMBonusRewarder(rewarder, rm)
    return rewarder
