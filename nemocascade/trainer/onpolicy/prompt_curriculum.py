"""The prompt side of an RL curriculum, and length-grouped prompt windows.

Input-context curriculum. C1's SWE RL (§4.7) grows the input context in
sub-stages: the 8B trains on prompts of at most 16K tokens for 30 steps, then
24K; its first prompts show the ground-truth files only, later ones mix in
retrieved distractor files. A sub-stage of `rl.curriculum` may set

* `max_prompt_tokens`: a prompt whose rendered length (tokens, the longest
  over the stage's modes) exceeds it is skipped and counted
  (`prompts_skipped_long`). A skipped prompt is consumed like a served one,
  so it comes back in the next epoch, under that sub-stage's limit;
* `levels`: only examples of these difficulty levels are served (the others
  are counted in `prompts_skipped_level`). In the built-in swe world level 3
  is C1's mixed localization (a distractor file mixed in) and levels 1–2
  show the ground-truth files only, so `levels=(1, 2)` then `(1, 2, 3)` is
  C1's order. A record file has levels only where its records carry a
  `difficulty` field; the released SWE RL records (`prompt`, `golden_patch`,
  `relevant_file_contents`, `instance_id`, `source`) do not mark which
  prompts hold distractor files, so for them the prompt-length limit is the
  curriculum (a prompt with more files is a longer one).

Length grouping (`rl.length_group_window` = W > 0). SWE prompts run from a
few thousand to tens of thousands of tokens, and a step pays for its longest
prompt: the sampler left-pads every prompt of a call to the power of two
above the longest (`rollout/decoding.prompt_bucket`) and the train rows are
that bucket plus the responses. So the loader's items are read W at a time,
sorted by prompt length (stable), cut into groups of one step's prompts, and
the groups are served in an order drawn from (seed, window index); a step
then holds prompts of similar length. Every item of a window is served
exactly once. A filter after the grouping (the curriculum's limits, epoch
filtering) can make a step straddle two neighbouring groups.

Both are deterministic: the limits only skip, and the grouped order is a
function of the window's items and the seed. The state is the loader's
position at the window's start plus the items served from it, so a resumed
run replays the window and serves exactly the prompts an uninterrupted one
would.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import numpy as np

from nemocascade.data import pipelines
from nemocascade.tasks import base as tasks_base


@dataclasses.dataclass(frozen=True)
class Limits:
    """Which prompts a curriculum sub-stage serves."""

    max_prompt_tokens: int = 0  # 0 = no limit (beyond the context's room)
    levels: tuple[int, ...] = ()  # () = every difficulty level


class PromptSource:
    """A loader of one-item batches (`pipelines.rl_prompts(batch_size=1)`) under
    curriculum `Limits`, optionally length-grouped in windows.

    Args:
      loader: yields `[{"epoch": int, "example": Example}]`.
      length: example → prompt length in tokens (`parts.prompt_length`, memoized);
        needed for a token limit or grouping.
      window: items per length-sorted window (0 = no grouping), a multiple of
        `group`.
      group: items per step on this process (one group of a window).
      seed: orders each window's groups (the same on every process, so the
        processes' groups of a step hold prompts of similar rank).
    """

    def __init__(
        self,
        loader: pipelines.Loader,
        *,
        length: Callable[[tasks_base.Example], int] | None = None,
        window: int = 0,
        group: int = 1,
        seed: int = 0,
    ):
        if window < 0 or group <= 0 or (window and window % group):
            raise ValueError(
                f"length grouping: window={window} must be 0 or a positive multiple of "
                f"the prompts per step group={group} (config.rl.length_group_window)"
            )
        if window and length is None:
            raise ValueError("length grouping (config.rl.length_group_window) needs a length")
        self._loader = loader
        self._length = length
        self._window, self._group, self._seed = window, group, seed
        self.limits = Limits()
        self.skipped_long = 0
        self.skipped_level = 0
        self._start: dict | None = None  # the loader's state at the window's start
        self._index = -1  # windows read so far, minus one
        self._order: list = []
        self._served = 0

    @property
    def epoch_size(self) -> int:
        return self._loader.epoch_size

    def set_limits(self, limits: Limits) -> None:
        """The limits of the sub-stage in force (from the next item on)."""
        if limits.max_prompt_tokens and self._length is None:
            raise ValueError("max_prompt_tokens (config.rl.curriculum) needs a prompt length")
        self.limits = limits

    def metrics(self) -> dict[str, int]:
        return {
            "prompts_skipped_long": self.skipped_long,
            "prompts_skipped_level": self.skipped_level,
        }

    def __iter__(self):
        return self

    def __next__(self) -> list[dict]:
        # Two epochs and a window of skips in a row: no prompt passes the limits.
        bound = 2 * max(self.epoch_size, 1) + self._window
        for _ in range(bound):
            batch = self._next_raw()
            example = batch[0]["example"]
            lim = self.limits
            if lim.levels and example.difficulty not in lim.levels:
                self.skipped_level += 1
            elif lim.max_prompt_tokens and self._length(example) > lim.max_prompt_tokens:
                self.skipped_long += 1
            else:
                return batch
        raise RuntimeError(
            f"no RL prompt in {bound} draws passes the curriculum's limits {self.limits} "
            "(config.rl.curriculum[i].max_prompt_tokens / .levels): raise the limit or "
            "choose levels the prompts have (records without a 'difficulty' field are level 0)"
        )

    def _next_raw(self) -> list[dict]:
        if not self._window:
            return next(self._loader)
        if self._served == len(self._order):
            self._fill(self._index + 1, self._loader.get_state())
        self._served += 1
        return self._order[self._served - 1]

    def _fill(self, index: int, start: dict) -> None:
        """Reads window `index` from the loader (at `start`) and orders it."""
        items = list(itertools.islice(self._loader, self._window))
        if not items:
            raise StopIteration
        lengths = [self._length(b[0]["example"]) for b in items]
        ranked = sorted(range(len(items)), key=lengths.__getitem__)  # stable
        groups = [ranked[i : i + self._group] for i in range(0, len(ranked), self._group)]
        perm = np.random.default_rng([self._seed, index]).permutation(len(groups))
        self._order = [items[i] for g in perm for i in groups[g]]
        self._start, self._index, self._served = start, index, 0

    def get_state(self) -> dict:
        grouped = self._window and self._index >= 0
        return {
            "loader": self._start if grouped else self._loader.get_state(),
            "window_size": self._window,
            "window": self._index if grouped else -1,
            "served": self._served if grouped else 0,
            "skipped_long": self.skipped_long,
            "skipped_level": self.skipped_level,
        }

    def set_state(self, state: dict) -> None:
        if "window_size" not in state:  # a bare loader's state (an earlier checkpoint)
            self._loader.set_state(state)
            return
        if state["window"] >= 0 and state["window_size"] != self._window:
            raise ValueError(
                f"the saved prompt stream is inside a length-grouped window of "
                f"{state['window_size']} prompts; config.rl.length_group_window now gives "
                f"{self._window} per process: resume with the saved value"
            )
        self._loader.set_state(state["loader"])
        self._order, self._index, self._served = [], -1, 0
        if state["window"] >= 0:
            self._fill(int(state["window"]), state["loader"])
            self._served = int(state["served"])
        self.skipped_long = int(state["skipped_long"])
        self.skipped_level = int(state["skipped_level"])
