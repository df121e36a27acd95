"""What the serving engine queues and runs: jobs, their rows' outputs, and one call's rows.

A `Job` is one request's sampling work (`n` rows of one prompt); jobs with
equal `group_key` may share a sampler call, and a queued job can join a
running call if it also `fits` the call's prompt bucket and decode length.
`Call` maps the call's rows to their jobs, answers a job when its last row
finishes and passes streamed jobs their tokens.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable

import numpy as np

from nemocascade.rollout import decoding, modes as modes_lib, sampling_methods


@dataclasses.dataclass(frozen=True)
class Job:
    """One request's sampling work: `n` rows of the same prompt.

    Attributes:
      prompt_ids: the rendered prompt.
      mode: decoding mode (stop ids, thinking budget, parser).
      method: `sampling_methods.Greedy()` or `sampling_methods.Sample(...)`.
      max_tokens: completion tokens allowed per row.
      n: rows (choices) to sample.
      seed: fixes the RNG of a sampled job; ignored by greedy jobs.
    """

    prompt_ids: tuple[int, ...]
    mode: modes_lib.Mode
    method: sampling_methods.Method
    max_tokens: int
    n: int = 1
    seed: int | None = None


@dataclasses.dataclass(frozen=True)
class Output:
    """One row's result: generated ids (stop token included) and whether no stop came."""

    token_ids: list[int]
    truncated: bool


def group_key(job: Job, index: int) -> tuple:
    """Jobs with equal keys share a sampler call (see the module docstring)."""
    if job.seed is not None and not isinstance(job.method, sampling_methods.Greedy):
        return (job.method, "seed", index)
    return (job.method,)


# on_tokens(row k of the job, its ids so far): called on the worker thread.
TokenSink = Callable[[int, list[int]], None]


@dataclasses.dataclass
class Pending:
    job: Job
    future: concurrent.futures.Future
    on_tokens: TokenSink | None = None


class Call:
    """The rows of one sampler call and their jobs; jobs join while it runs.

    Row i of the call is row `owner[i][1]` of job `owner[i][0]`; a job's
    future is set when its last row finishes.
    """

    def __init__(self, stats: dict):
        self.stats = stats
        self.jobs: list[Pending] = []
        self.owner: list[tuple[int, int]] = []
        self.rows: list[list[Output | None]] = []
        self.missing: list[int] = []

    def add(self, p: Pending) -> list[tuple[list[int], modes_lib.Mode, int]]:
        """Adds a job; its rows as (prompt, mode, max_tokens), in row order."""
        j = len(self.jobs)
        self.jobs.append(p)
        self.owner += [(j, k) for k in range(p.job.n)]
        self.rows.append([None] * p.job.n)
        self.missing.append(p.job.n)
        return [(list(p.job.prompt_ids), p.job.mode, p.job.max_tokens)] * p.job.n

    def finish(self, indices, rollout: decoding.Rollout) -> None:
        for r, i in enumerate(indices):
            j, k = self.owner[i]
            p = self.jobs[j]
            n, limit = int(rollout.lengths[r]), p.job.max_tokens
            ids = [int(t) for t in np.asarray(rollout.completion_tokens[r, : min(n, limit)])]
            self.rows[j][k] = Output(ids, bool(rollout.truncated[r]) or n > limit)
            self.stats["tokens"] += len(ids)
            self.missing[j] -= 1
            if self.missing[j] == 0:
                p.future.set_result(self.rows[j])
            elif p.on_tokens is not None:  # the job's other rows still decode
                p.on_tokens(k, ids)

    def streamed(self, indices: np.ndarray) -> np.ndarray:
        """The rows among `indices` whose job streams its tokens."""
        return indices[[self.jobs[self.owner[i][0]].on_tokens is not None for i in indices]]

    def tokens(self, indices, tokens, lengths) -> None:
        for i, t, n in zip(indices, tokens, lengths, strict=True):
            j, k = self.owner[i]
            p = self.jobs[j]
            if p.on_tokens is not None and not p.future.done():
                p.on_tokens(k, [int(x) for x in t[: min(int(n), p.job.max_tokens)]])


def _special_ids(mode: modes_lib.Mode) -> tuple:
    """The ids the sampler stops or forces on: one call serves one set of them."""
    return mode.stop_ids, mode.think_close_ids, mode.think_end_id


def fits(job: Job, key: tuple, mode: modes_lib.Mode, p: int, m: int, max_seq_len: int) -> bool:
    """Whether `job` can join a running call of `key`, prompt bucket p and m tokens."""
    same_tokens = _special_ids(job.mode) == _special_ids(mode)
    n = len(job.prompt_ids)
    return (
        group_key(job, -1) == key
        and same_tokens
        and n <= p
        and n + m <= max_seq_len
        and job.max_tokens <= m
    )
