"""The one verifier signature, its result record and the answer parser.

Every reward in the project is `(prompt, completion, example) -> RewardResult`
computed on the host. `completion` is the full assistant text; verifiers score
only the answer after `</think>` (see `split_thinking`), and an unfinished
think block scores 0 everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nemocascade.tasks import base as tasks_base

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclasses.dataclass(frozen=True)
class RewardResult:
    """A scalar reward and diagnostic details (never used as reward)."""

    score: float
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


Verifier = Callable[[str, str, tasks_base.Example], RewardResult]


def split_thinking(completion: str) -> tuple[str | None, str | None]:
    """Splits an assistant completion into (thinking, answer).

    * no think tags: (None, whole text stripped);
    * `<think>T</think>A`: (T, A), both stripped; text before `<think>` is dropped;
    * `<think>T` without `</think>` (unfinished): (T, None);
    * `T</think>A` without an opening tag (the template opened it): (T, A).

    The first `</think>` ends the block; anything after it is the answer.
    """
    close = completion.find(THINK_CLOSE)
    open_ = completion.find(THINK_OPEN)
    if close < 0:
        if open_ < 0:
            return None, completion.strip()
        return completion[open_ + len(THINK_OPEN) :].strip(), None
    start = open_ + len(THINK_OPEN) if 0 <= open_ < close else 0
    return completion[start:close].strip(), completion[close + len(THINK_CLOSE) :].strip()


def unfinished(info: dict[str, Any] | None = None) -> RewardResult:
    """The result for a completion whose think block never closed."""
    return RewardResult(0.0, {**(info or {}), "error": "unfinished thinking"})
