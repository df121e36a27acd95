"""Streaming verification: rows are scored while the rest of the batch still decodes.

The continuous engine reports rows as they finish (`on_finish`); each report
becomes one job for a single background thread that runs the rewarder on
those rows (the verifier pool's worker processes do the scoring, so the
thread mostly waits on pipes and leaves the GIL to the sampler's host loop).
`finish(rollout_end)` waits for the remaining jobs and returns the scores in
row order, identical to scoring the whole batch at once because every row is
scored by the same deterministic verifier, plus how much of the verification
ran before the rollout ended:

    verify_s          seconds the thread spent scoring (all jobs)
    verify_overlap_s  the part of it before `rollout_end` (hidden behind decoding)
    verify_wait_s     seconds `finish` waited after the rollout ended
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

# score(row indices, completions) -> float scores, one per row
ScoreRows = Callable[[np.ndarray, Sequence[str]], np.ndarray]


class StreamingScorer:
    """Scores `n` rows in submitted pieces on one background thread."""

    def __init__(self, score_rows: ScoreRows, n: int):
        self._score_rows = score_rows
        self._scores = np.zeros((n,), np.float32)
        self._seen = np.zeros((n,), bool)
        self._busy: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="verify")
        self._jobs: list[concurrent.futures.Future] = []

    def submit(self, rows: np.ndarray, completions: Sequence[str]) -> None:
        """Queues rows (indices into the batch) and their completion texts."""
        rows = np.asarray(rows, np.int64)
        if len(rows) != len(completions):
            raise ValueError(f"{len(rows)} rows but {len(completions)} completions")
        if self._seen[rows].any():
            raise ValueError(f"rows submitted twice: {rows[self._seen[rows]].tolist()}")
        self._seen[rows] = True
        self._jobs.append(self._pool.submit(self._run, rows, list(completions)))

    def _run(self, rows: np.ndarray, completions: list[str]) -> None:
        start = time.perf_counter()
        scores = np.asarray(self._score_rows(rows, completions), np.float32)
        with self._lock:
            self._scores[rows] = scores
            self._busy.append((start, time.perf_counter()))

    def finish(self, rollout_end: float) -> tuple[np.ndarray, dict[str, float]]:
        """Scores of all rows (each must have been submitted) and the overlap metrics."""
        if not self._seen.all():
            missing = np.flatnonzero(~self._seen)
            raise ValueError(f"rows never submitted: {missing[:10].tolist()}")
        waited = time.perf_counter()
        for job in self._jobs:
            job.result()  # re-raises a scorer's exception here
        self._pool.shutdown()
        waited = time.perf_counter() - max(waited, rollout_end)
        busy = sum(end - start for start, end in self._busy)
        overlap = sum(max(0.0, min(end, rollout_end) - start) for start, end in self._busy)
        return self._scores.copy(), {
            "verify_s": busy,
            "verify_overlap_s": overlap,
            "verify_wait_s": max(waited, 0.0),
        }
