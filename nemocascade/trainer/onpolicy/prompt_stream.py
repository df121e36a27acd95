"""RL prompt stream with epoch-level dynamic filtering (C1 math RL).

Wraps the grain RL prompt loader. With `epoch` filtering, a prompt whose
whole group was solved (or failed) in its last visit is skipped in later
epochs, except that it is resampled with probability `resample_easy`
(`resample_hard`) so the model does not forget it entirely. The decision is
a deterministic hash of (seed, uid, epoch), so a resumed run skips the same
prompts. State (loader position + last pass rates) is JSON.
"""

from __future__ import annotations

import hashlib

from nemocascade.data import pipelines
from nemocascade.tasks import base as tasks_base


def _uniform(seed: int, uid: str, epoch: int) -> float:
    h = hashlib.sha256(f"{seed}:{uid}:{epoch}".encode()).digest()
    return int.from_bytes(h[:8], "little") / 2**64


class PromptStream:
    """`next_batch()` → `batch_size` Examples; `record()` feeds back group results.

    The wrapped loader must yield one item per `next()` (batch size 1), so its
    saved position is exactly the stream's.
    """

    def __init__(
        self,
        loader: pipelines.Loader,
        batch_size: int,
        *,
        epoch_filter: bool,
        resample_easy: float,
        resample_hard: float,
        seed: int,
    ):
        self._loader = loader
        self._batch_size = batch_size
        self._epoch_filter = epoch_filter
        self._easy, self._hard, self._seed = resample_easy, resample_hard, seed
        self.last_rate: dict[str, float] = {}
        self.skipped = 0
        self.epoch = 0

    @property
    def source(self):
        """The wrapped loader (a `prompt_curriculum.PromptSource` in the on-policy driver)."""
        return self._loader

    def _keep(self, item: dict) -> bool:
        if not self._epoch_filter or item["epoch"] == 0:
            return True
        rate = self.last_rate.get(item["example"].uid)
        if rate is None or 0.0 < rate < 1.0:
            return True
        p = self._easy if rate >= 1.0 else self._hard
        return _uniform(self._seed, item["example"].uid, item["epoch"]) < p

    def next_batch(self) -> list[tasks_base.Example]:
        out: list[tasks_base.Example] = []
        draws = 0
        while len(out) < self._batch_size:
            (item,) = next(self._loader)
            self.epoch = max(self.epoch, int(item["epoch"]))
            if self._keep(item):
                out.append(item["example"])
            else:
                self.skipped += 1
            draws += 1
            if draws > 1000 * self._batch_size:
                raise RuntimeError(
                    "epoch filtering removed (almost) every RL prompt: all are solved or "
                    "unsolved; raise config.rl.resample_easy/resample_hard or num_prompts"
                )
        return out

    def record(self, examples: list[tasks_base.Example], pass_rates: list[float]):
        for ex, rate in zip(examples, pass_rates, strict=True):
            self.last_rate[ex.uid] = float(rate)

    def get_state(self) -> dict:
        return {
            "loader": self._loader.get_state(),
            "last_rate": dict(self.last_rate),
            "skipped": self.skipped,
            "epoch": self.epoch,
        }

    def set_state(self, state: dict):
        self._loader.set_state(state["loader"])
        self.last_rate = dict(state.get("last_rate", {}))
        self.skipped = int(state.get("skipped", 0))
        self.epoch = int(state.get("epoch", 0))
