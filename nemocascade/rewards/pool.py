"""Host process pool that scores rollouts with per-item timeouts.

Verifiers are host Python and code verification waits on the sandbox, so a
rollout batch is spread over worker processes. Each worker takes one item at
a time; an item that exceeds `timeout_s` gets its worker killed and replaced,
and an item whose worker dies scores 0 too; either way `info["error"]` says
why and the batch completes. Workers are spawned (never forked) because the
trainer process holds JAX's threads.
"""

from __future__ import annotations

import collections
import multiprocessing
import time
from multiprocessing import connection

from nemocascade.rewards import base, registry
from nemocascade.tasks import base as tasks_base


def _score_one(name, prompt, completion, example) -> base.RewardResult:
    try:
        return registry.get(name)(prompt, completion, example)
    except Exception as exc:  # a verifier bug must not take down the batch
        return base.RewardResult(0.0, {"error": f"verifier raised {type(exc).__name__}: {exc}"})


_READY = "ready"
_STARTUP_TIMEOUT_S = 120.0


def _worker_loop(conn) -> None:
    conn.send(_READY)  # imports are done: per-item deadlines may start
    while (item := conn.recv()) is not None:
        index, args = item
        result = _score_one(*args)
        conn.send((index, result.score, result.info))


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_loop, args=(child,), daemon=True)
        self.process.start()
        child.close()
        # A spawned worker first imports the verifiers (seconds on a loaded
        # machine); wait for it so that time is never charged to an item's timeout.
        if not self.conn.poll(_STARTUP_TIMEOUT_S) or self.conn.recv() != _READY:
            self.kill()
            raise RuntimeError(f"verifier worker did not start within {_STARTUP_TIMEOUT_S:.0f} s")
        self.item: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class VerifierPool:
    """Scores (prompt, completion, example) items with named verifiers.

    Use as a context manager. `num_workers=0` scores in the calling process
    (no per-item timeout; the sandbox still bounds code).
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 10.0):
        if num_workers < 0 or timeout_s <= 0:
            raise ValueError(
                f"need num_workers >= 0 and timeout_s > 0, got {num_workers}, {timeout_s}"
            )
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def __enter__(self) -> VerifierPool:
        self._workers = [_Worker(self._ctx) for _ in range(self.num_workers)]
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
                worker.process.join(timeout=2.0)
            except OSError:
                pass
            if worker.process.is_alive():
                worker.kill()
        self._workers = []

    def score(
        self,
        verifier_names: list[str],
        prompts: list[str],
        completions: list[str],
        examples: list[tasks_base.Example],
    ) -> list[base.RewardResult]:
        """One result per item, in order; failures score 0 with info["error"]."""
        n = len(prompts)
        if not len(verifier_names) == n == len(completions) == len(examples):
            raise ValueError(
                f"length mismatch: {len(verifier_names)} names, {n} prompts, "
                f"{len(completions)} completions, {len(examples)} examples"
            )
        for name in set(verifier_names):
            registry.get(name)  # fail fast on a bad name, in the caller
        items = list(zip(verifier_names, prompts, completions, examples, strict=True))
        if self.num_workers == 0:
            return [_score_one(*item) for item in items]
        if not self._workers:
            raise RuntimeError("VerifierPool used outside its `with` block")
        return self._score_parallel(items)

    def _score_parallel(self, items: list) -> list[base.RewardResult]:
        results: list[base.RewardResult | None] = [None] * len(items)
        pending = collections.deque(range(len(items)))
        while pending or any(w.item is not None for w in self._workers):
            for worker in self._workers:
                if worker.item is None and pending:
                    worker.item = pending.popleft()
                    worker.deadline = time.monotonic() + self.timeout_s
                    worker.conn.send((worker.item, items[worker.item]))
            busy = [w for w in self._workers if w.item is not None]
            wait_s = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = set(connection.wait([w.conn for w in busy], timeout=wait_s))
            for slot, worker in enumerate(self._workers):
                if worker.item is None:
                    continue
                if worker.conn in ready:
                    try:
                        index, score, info = worker.conn.recv()
                    except (EOFError, OSError):
                        self._replace(slot, results, "verifier worker crashed")
                        continue
                    results[index] = base.RewardResult(score, info)
                    worker.item = None
                elif time.monotonic() >= worker.deadline:
                    self._replace(slot, results, f"timeout after {self.timeout_s}s")
        return results

    def _replace(self, slot: int, results: list, error: str) -> None:
        worker = self._workers[slot]
        results[worker.item] = base.RewardResult(0.0, {"error": error})
        worker.kill()
        self._workers[slot] = _Worker(self._ctx)
