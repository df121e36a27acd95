"""DAPO-style refill: sample more prompts until a step has enough informative groups.

With `rl.dynamic_filter="refill"` a group whose rewards are all equal (zero
spread: all solved, all failed) is dropped from the loss, as with `"batch"`,
but instead of training on fewer groups the step draws the next
`prompts_per_step` prompts from the same stream, samples and scores them, and
repeats until it holds `prompts_per_step` groups with non-zero spread or has
sampled `rl.refill_max_batches` extra rounds (DAPO's dynamic sampling); a
capped step trains on what it has.

* Rounds are whole batches of the step's size, so the sampler's shapes (and
  its compiles) do not change; kept groups past the target are not trained on.
* Every round is a full draw of the prompt stream and every sampled group's
  pass rate goes back to it, so the saved stream position counts every round
  and a resumed run continues exactly where the uninterrupted one would.
* The merged batch has `prompts_per_step * group_size` rows whatever happened:
  the kept groups, then (on a capped step) dropped groups, which are outside
  the loss like any filtered group; `rl_batch.compact` then trims it as usual.

Metrics of a refilled step:

    refill_rounds   extra rounds sampled (0 = the first round was enough)
    groups_kept     groups with non-zero reward spread in the train batch
    refill_capped   1 when the cap was hit short of `prompts_per_step` groups
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from nemocascade.tasks import base as tasks_base
from nemocascade.trainer.onpolicy import rl_batch

# Metrics of `rl_batch.prepare` that describe the train batch (recomputed on the
# merged one); the others describe the sampled rollouts (averaged over rounds).
_BATCH_METRICS = ("groups_filtered", "seqs_in_loss")


@dataclasses.dataclass(frozen=True)
class Round:
    """One sampling round: its prompts, their prepared (uncompacted) rows, its timings."""

    examples: list[tasks_base.Example]
    prepared: rl_batch.Prepared  # kept_groups: the groups with non-zero reward spread
    metrics: dict[str, float]  # summed over rounds (verification seconds)

    @property
    def num_kept(self) -> int:
        return int(np.sum(self.prepared.kept_groups))


def collect(first: Round, draw: Callable[[int], Round], max_extra: int) -> list[Round]:
    """`first` plus rounds `draw(1), draw(2), ...` until `len(first.examples)` groups
    are kept or `max_extra` extra rounds were drawn."""
    target = len(first.examples)
    rounds = [first]
    while sum(r.num_kept for r in rounds) < target and len(rounds) <= max_extra:
        rounds.append(draw(len(rounds)))
    return rounds


def _pad_width(value: np.ndarray, width: int) -> np.ndarray:
    """[n, T] → [n, width], zeros on the right (pads: segment 0, outside the loss)."""
    if value.ndim != 2 or value.shape[1] == width:
        return value
    return np.pad(value, ((0, 0), (0, width - value.shape[1])))


def merge(rounds: Sequence[Round], group_size: int) -> rl_batch.Prepared:
    """The step's `Prepared` of `len(rounds[0].examples)` groups, kept groups first.

    Its metrics: the rollout metrics averaged over every sampled row, the
    batch metrics of the merged batch, the rounds' summed timings and the
    refill metrics.
    """
    target = len(rounds[0].examples)
    kept, dropped = [], []
    for r, rnd in enumerate(rounds):
        for g, keep in enumerate(rnd.prepared.kept_groups):
            (kept if keep else dropped).append((r, g))
    picks = kept[:target] + dropped[: target - min(len(kept), target)]
    width = max(rnd.prepared.batch["loss_mask"].shape[1] for rnd in rounds)

    def gather(get: Callable[[rl_batch.Prepared], np.ndarray]) -> np.ndarray:
        pieces = []
        for r, g in picks:
            rows = get(rounds[r].prepared)[g * group_size : (g + 1) * group_size]
            pieces.append(_pad_width(rows, width))
        return np.concatenate(pieces)

    batch = {k: gather(lambda p, k=k: p.batch[k]) for k in rounds[0].prepared.batch}
    groups_kept = min(len(kept), target)
    rows = np.array([len(rnd.prepared.rewards) for rnd in rounds], np.float64)
    metrics = {
        k: float(np.average([rnd.prepared.metrics[k] for rnd in rounds], weights=rows))
        for k in rounds[0].prepared.metrics
        if k not in _BATCH_METRICS
    }
    metrics.update(
        {k: float(sum(rnd.metrics[k] for rnd in rounds)) for k in rounds[0].metrics},
        groups_filtered=1.0 - groups_kept / target,
        seqs_in_loss=float(batch["loss_mask"].any(axis=1).mean()),
        refill_rounds=float(len(rounds) - 1),
        groups_kept=float(groups_kept),
        refill_capped=float(groups_kept < target),
    )
    return rl_batch.Prepared(
        batch=batch,
        rewards=gather(lambda p: p.rewards),
        kept_groups=np.arange(len(picks)) < groups_kept,
        metrics=metrics,
    )
