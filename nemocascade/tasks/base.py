"""The record every domain of the built-in task world produces.

An `Example` is plain host data: the user request, the SFT targets in both
decoding modes, and whatever the gold verifier needs (`meta`). Data pipelines,
verifiers, the RM and the evaluation matrix all consume this one type.
"""

from __future__ import annotations

import dataclasses
from typing import Any

DOMAINS = ("math", "code", "if", "chat", "swe")
# The same domains in the order the Cascade 1 chain trains them (report columns).
CASCADE_ORDER = ("chat", "if", "math", "code", "swe")
assert sorted(CASCADE_ORDER) == sorted(DOMAINS)
SPLITS = ("sft", "rl", "eval")
MODES = ("thinking", "instruct")


@dataclasses.dataclass(frozen=True)
class Example:
    """One task instance.

    Attributes:
      uid: stable identifier; the hash split is computed from it.
      domain: one of `DOMAINS`.
      difficulty: integer difficulty level (domain-specific meaning).
      prompt: the user message, without any mode flag.
      thinking: SFT target for the think block (thinking mode), without tags.
      answer: SFT target for the final answer (both modes).
      meta: verifier data (gold answer, hidden tests, constraints, rubric).
    """

    uid: str
    domain: str
    difficulty: int
    prompt: str
    thinking: str
    answer: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
