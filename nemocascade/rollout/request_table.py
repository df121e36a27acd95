"""The requests of one continuous-batching call, as host arrays that grow as requests join.

`continuous.generate` keeps here what it knows of each request: the prompt,
left-padded to the call's bucket P, its thinking and answer budgets, its
`max_tokens` and its outputs once harvested. `Table.join` appends requests
handed over while the call runs (`Request`), checked against the call's P and
M = max_new_tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from nemocascade.rollout import decoding


@dataclasses.dataclass(frozen=True)
class Request:
    """A request that joins a running `generate` call (`more`): prompt ids and budgets."""

    prompt: Sequence[int]
    thinking_budget: int | None = None
    answer_budget: int | None = None
    max_tokens: int | None = None  # None: the call's max_new_tokens


class Table:
    """Host arrays of a call's requests (prompts, budgets, outputs), growing as requests join."""

    def __init__(self, prompts, lengths, budget, answer, limit, p: int, m: int, pad_id: int):
        self.p, self.m, self.pad_id = p, m, pad_id
        self.lengths, self.budget, self.answer = lengths, budget, answer
        self.limit = limits(limit, len(prompts), m)
        self.prompt_np = decoding.left_padded(prompts, len(prompts), self.p, self.pad_id)
        self.out = {
            "completion_tokens": np.full((0, m), pad_id, np.int32),
            "logprobs": np.zeros((0, m), np.float32),
            "forced_mask": np.zeros((0, m), np.int32),
            "completion_mask": np.zeros((0, m), np.int32),
            "stopped": np.zeros((0,), bool),
        }
        self._grow(len(prompts))

    def __len__(self) -> int:
        return len(self.lengths)

    def _grow(self, k: int) -> None:
        for key, buf in self.out.items():
            fill = self.pad_id if key == "completion_tokens" else 0
            self.out[key] = np.concatenate([buf, np.full((k,) + buf.shape[1:], fill, buf.dtype)])

    def join(self, requests: Sequence[Request], max_seq_len: int, budgets_allowed: bool) -> range:
        """Appends `requests` (checked against the call's P and M); their indices."""
        n, k = len(self), len(requests)
        prompts = [list(r.prompt) for r in requests]
        for q in prompts:
            if not q or len(q) > self.p or len(q) + self.m > max_seq_len:
                raise ValueError(
                    f"a joining prompt of {len(q)} tokens does not fit the call's prompt bucket "
                    f"{self.p} and max_new_tokens {self.m} (model.max_seq_len={max_seq_len})"
                )
        thinking = [r.thinking_budget for r in requests]
        budget = decoding.per_row_budget(thinking, k, "thinking_budget")
        answer = decoding.per_row_budget([r.answer_budget for r in requests], k, "answer_budget")
        if not budgets_allowed and (budget < decoding.NO_BUDGET).any():
            raise ValueError("a joining thinking_budget needs think_close_ids and think_end_id")
        self.prompt_np = np.concatenate(
            [self.prompt_np, decoding.left_padded(prompts, len(prompts), self.p, self.pad_id)]
        )
        self.lengths = np.concatenate([self.lengths, [len(q) for q in prompts]]).astype(np.int32)
        self.budget = np.concatenate([self.budget, budget]).astype(np.int32)
        self.answer = np.concatenate([self.answer, answer]).astype(np.int32)
        limit = limits([r.max_tokens for r in requests], k, self.m)
        self.limit = np.concatenate([self.limit, limit]).astype(np.int32)
        self._grow(k)
        return range(n, n + k)

    def cut(self, reqs) -> int:
        """Cuts harvested rows `reqs` at their `max_tokens`; how many were longer.

        A cut row reads as decoded alone with that length: nothing after it, and
        truncated (a stop token past the limit does not count).
        """
        longer = 0
        for r in reqs:
            n = self.limit[r]
            if self.out["completion_mask"][r].sum() <= n:
                continue
            longer += 1
            for key in ("completion_tokens", "logprobs", "forced_mask", "completion_mask"):
                self.out[key][r, n:] = self.pad_id if key == "completion_tokens" else 0
            self.out["stopped"][r] = False
        return longer


def limits(values, n: int, m: int) -> np.ndarray:
    """Per-request `max_tokens` (None -> m), checked to lie in [1, m]."""
    values = [m] * n if values is None else [m if v is None else int(v) for v in values]
    if len(values) != n or any(not 0 < v <= m for v in values):
        raise ValueError(f"max_tokens needs {n} values in [1, max_new_tokens={m}], got {values}")
    return np.asarray(values, np.int32)
