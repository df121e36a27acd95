"""A request queue that batches concurrent requests into sampler calls, which others join.

One worker thread owns the model. It takes the first waiting job, keeps
collecting jobs (`_collect`: under load, as many rows as the previous batch,
then while they arrive less than `batch_wait_s` apart; at most `WAIT_CAP`
gaps, `max_batch` rows; no wait after a batch of one job, so a lone client
pays nothing), and runs one sampler call per group of compatible jobs (`sampler_fn`:
`continuous.generate` by default, `decoding.generate` with `engine="static"`):

* greedy jobs share one call whatever their seed (the argmax needs no RNG);
* sampled jobs without a seed share one call per sampling method (the
  method is static in the sampler's compiled decode), with an RNG drawn from
  the engine's counter;
* a sampled job with a seed runs alone, its `n` rows in one call with a
  key made from the seed (`seed_key`), so the same request always gets the
  same tokens (a row's key is (call key, row index in the call, completion
  index): a seeded job must own the call key and its row indices).

Rows of one call may ask for different `max_tokens`: the call decodes for
the largest (rounded up to a power of two so compiles stay bounded) and each
row is cut at its own (the continuous sampler frees the row's slot there);
tokens do not depend on the call's length. Instruct and thinking rows share
a call (per-row thinking budgets, `modes.sampler_kwargs`).

Admission is counted in slots: `acquire` fails with `QueueFull` once
`max_queue` requests are admitted and unfinished; the HTTP layer releases a
slot when its response ends or its client goes away. A job cancelled before
its batch starts is skipped (`stats["skipped"]`); one already in a sampler
call finishes there and its result is dropped.

With the continuous sampler a call's rows share up to `max_batch` decode
slots refilled between chunks of `chunk_steps` steps, and a job's future is
set as soon as its own rows finish (`on_finish`), while the call's other rows
still decode: a short answer does not wait for the call's longest one.

Joining. Between chunks the running call takes queued jobs of its own group
(greedy, or sampled without a seed with the same method) into its free slots
(`_joiners`, the sampler's `more` hook), if their prompt fits the call's
prompt bucket and their `max_tokens` its decode length; so under load one
call keeps every slot busy instead of ending with its slowest row. The first
queued job that cannot join (a seeded one, a longer prompt or answer, another
method) is held for the next call and stops further joining, so nothing waits
behind an endless stream of joiners. To let requests join, a call started
under load (more admitted requests than its own) gets slots for all admitted
requests (up to `max_batch`) and a prompt bucket that fits the recent
`RECENT_PROMPTS` prompts; a lone request decodes in one slot at its own
bucket. A call with fewer slots than admitted requests (a burst after a
quiet spell) takes no joiners: it drains, and the next call takes the
waiting jobs with slots for all of them; so does a call with four times
more slots than admitted requests (the load fell: a lone client after a
burst must not pay for a full-size decode step), `stats["resized"]`. Under load
a call whose rows have all finished collects the returning clients' jobs
like a new batch (`_joiners` with a wait) instead of ending. Joined rows
get the tokens they would get alone: greedy needs no RNG, and a sampled
row's key depends only on its index in the call.

Streaming. `submit(job, on_tokens)` registers a sink that receives each row's
ids so far after every decode chunk (read back only for jobs with a sink) and
when the row finishes; the HTTP layer turns them into stream deltas. The
static sampler reports nothing before the end.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Sequence

import jax

from nemocascade.rollout import decoding, modes as modes_lib, sampling_methods
from nemocascade.serve import jobs as jobs_lib, sampler
from nemocascade.sharding import hosts

MIN_TOKENS_BUCKET = 16
WAIT_CAP = 10  # a batch collects for at most this many `batch_wait_s` gaps
RECENT_PROMPTS = 256  # a call's prompt bucket fits the longest of these (joiners fit it)


class QueueFull(RuntimeError):
    """`max_queue` requests are already admitted."""


Job, Output, TokenSink = jobs_lib.Job, jobs_lib.Output, jobs_lib.TokenSink
group_key = jobs_lib.group_key
SampleFn = sampler.SampleFn
ENGINES = sampler.ENGINES
sampler_fn = sampler.sampler_fn


def tokens_bucket(max_tokens: int, room: int) -> int:
    """Decode length of a call: a power of two >= max_tokens, at most `room`."""
    return min(max(MIN_TOKENS_BUCKET, 1 << max(max_tokens - 1, 0).bit_length()), room)


def seed_key(seed: int) -> jax.Array:
    """A key for any 64-bit seed (OpenAI's `seed` is any integer; keys take 31 bits)."""
    low, high = seed & 0x7FFFFFFF, (seed >> 31) & 0x7FFFFFFF
    return jax.random.fold_in(jax.random.key(low), high)


class Engine:
    """Batches submitted jobs into sampler calls on one worker thread."""

    def __init__(
        self,
        sample: SampleFn,
        max_seq_len: int,
        *,
        max_batch: int = 64,
        max_queue: int = 256,
        batch_wait_s: float = 0.005,
        seed: int = 0,
    ):
        if max_batch <= 0 or max_queue <= 0 or batch_wait_s < 0:
            raise ValueError(
                f"max_batch={max_batch} and max_queue={max_queue} must be > 0, "
                f"batch_wait_s={batch_wait_s} >= 0"
            )
        self._sample, self.max_seq_len = sample, max_seq_len
        self.max_batch, self.max_queue, self.batch_wait_s = max_batch, max_queue, batch_wait_s
        self._key = jax.random.key(seed)
        self._calls = 0
        self._last_jobs = 0  # jobs in the previous batch: >1 means concurrent load
        self._last_rows = 0
        self._queue: queue.Queue[jobs_lib.Pending | None] = queue.Queue()
        # Taken from the queue during a call but unable to join it: next call first.
        self._held: collections.deque[jobs_lib.Pending | None] = collections.deque()
        self._prompt_lens: collections.deque[int] = collections.deque(maxlen=RECENT_PROMPTS)
        self._lock = threading.Lock()
        self.active = 0  # admitted, unreleased requests
        self.stats = {
            "calls": 0,
            "rows": 0,
            "jobs": 0,
            "joined": 0,
            "resized": 0,
            "skipped": 0,
            "tokens": 0,
            "busy_s": 0.0,
            "host_cpu_s": 0.0,
        }
        self._thread = threading.Thread(target=self._loop, name="serve-engine", daemon=True)
        self._thread.start()

    # Admission -------------------------------------------------------------
    def acquire(self) -> None:
        with self._lock:
            if self.active >= self.max_queue:
                raise QueueFull(f"{self.active} requests in flight (max_queue={self.max_queue})")
            self.active += 1

    def release(self) -> None:
        with self._lock:
            self.active -= 1

    # Work ------------------------------------------------------------------
    def warmup(
        self,
        mode: modes_lib.Mode,
        method: sampling_methods.Method,
        max_tokens: int,
        prompt_len: int,
    ):
        """Compiles the decode for every batch bucket up to `max_batch` and every prompt
        bucket up to `prompt_len`, for one sampling method and `max_tokens` (the server's
        defaults), and the admission of joining requests into a full-size call, before
        any request waits on a compile. Returns the number of calls."""
        buckets = sorted({decoding.prompt_bucket(n) for n in range(1, prompt_len + 1)})
        rows = sorted({hosts.pow2_bucket(n) for n in range(1, self.max_batch + 1)})
        calls = 0
        for p in buckets:
            room = self.max_seq_len - p
            if room <= 0:
                break
            length = tokens_bucket(min(max_tokens, room), room)

            def prompts(b: int, first: int = 0, p: int = p) -> list[list[int]]:
                # Distinct prompts: the continuous sampler prefills each once.
                return [[mode.stop_ids[0]] * (p - 1) + [first + r] for r in range(b)]

            for b in rows:
                self._sample(prompts(b), [mode] * b, method, length, self._key, lambda *_: None)
                calls += 1
            # A call under load: one row, then joiners 1, 2, 4, ... at a time
            # (the prefill of each count of joining prompts compiles once).
            sizes = [0] + [b for b in rows if b < self.max_batch]  # none at the first poll

            def more(room: int, sizes=sizes, prompts=prompts, length=length):
                b = sizes.pop(0) if sizes and sizes[0] <= room else 0
                return [(q, mode, length) for q in prompts(b, first=1 + 2 * b)]

            hooks = {"more": more, "num_slots": self.max_batch, "prompt_bucket": p}
            self._sample(prompts(1), [mode], method, length, self._key, lambda *_: None, **hooks)
            calls += 1
        return calls

    def submit(self, job: Job, on_tokens: TokenSink | None = None) -> concurrent.futures.Future:
        """A future of `job.n` `Output`s; cancel it to drop a job that has not started.

        `on_tokens(k, ids)`, when given, receives row k's ids so far as they are
        decoded (on the worker thread; the continuous sampler only).
        """
        if len(job.prompt_ids) + job.max_tokens > self.max_seq_len:
            raise ValueError(
                f"prompt ({len(job.prompt_ids)} tokens) + max_tokens ({job.max_tokens}) "
                f"exceeds the context of {self.max_seq_len}"
            )
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._prompt_lens.append(len(job.prompt_ids))
        self._queue.put(jobs_lib.Pending(job, future, on_tokens))
        return future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _get(self, timeout: float | None) -> jobs_lib.Pending | None:
        """The next item, held ones first; `queue.Empty` after `timeout` (0: no wait)."""
        if self._held:
            return self._held.popleft()
        if timeout is not None and timeout <= 0:
            return self._queue.get_nowait()
        return self._queue.get(timeout=timeout)

    def _collect(self, first: jobs_lib.Pending) -> list[jobs_lib.Pending]:
        """`first` and the jobs that follow it with gaps under `batch_wait_s`.

        A burst (clients answered together send their next requests together)
        becomes one call instead of a small one and a large one: under load
        the batch waits for the previous batch's row count (or for the
        requests the HTTP layer has admitted and not yet submitted, the start
        of a burst), then while jobs keep arriving less than `batch_wait_s`
        apart, at most `WAIT_CAP` gaps in all. A lone client (a batch of one
        job before, no other admitted request) waits for nothing.
        """
        batch, rows = [first], first.job.n
        wait = self.batch_wait_s if self._last_jobs > 1 or self.active > rows else 0.0
        deadline = time.monotonic() + WAIT_CAP * wait
        while rows < self.max_batch:
            left = deadline - time.monotonic()
            expected = max(self._last_rows, self.active)  # grows while a burst arrives
            # Under load, wait for as many rows as expected (the clients the
            # last batch answered come back), then for gaps under `batch_wait_s`.
            gap = left if rows < expected else min(wait, left)
            try:
                item = self._get(gap)
            except queue.Empty:
                break
            if item is None:  # close(): finish this batch, then stop
                self._held.appendleft(None)
                break
            batch.append(item)
            rows += item.job.n
        return batch

    def _loop(self) -> None:
        while True:
            first = self._get(None)
            if first is None:
                return
            batch = self._collect(first)
            self._last_jobs, self._last_rows = len(batch), sum(p.job.n for p in batch)
            live = []
            for p in batch:
                if p.future.set_running_or_notify_cancel():
                    live.append(p)
                else:
                    self.stats["skipped"] += 1
            groups: dict[tuple, list[jobs_lib.Pending]] = {}
            for i, p in enumerate(live):
                groups.setdefault(jobs_lib.group_key(p.job, i), []).append(p)
            for key, group in groups.items():
                call = jobs_lib.Call(self.stats)
                try:
                    self._run(call, key, group)
                except Exception as e:  # a failed call fails its requests, not the server
                    logging.exception("sampler call failed")
                    for p in call.jobs or group:
                        if not p.future.done():
                            p.future.set_exception(e)

    def _joiners(self, key: tuple, mode: modes_lib.Mode, p: int, m: int, room: int, wait: float):
        """Queued jobs that can join the running call (`key`, prompt bucket p, m tokens).

        Taken in order while their rows fit `room`; the first job that cannot
        join is held for the next call and ends joining (no job waits behind
        an endless stream of joiners). With `wait` > 0 (an emptied call under
        load) they are collected like a batch (`_collect`): up to `WAIT_CAP`
        gaps for the first, then while they arrive less than `wait` apart.
        """
        taken, rows = [], 0
        deadline = time.monotonic() + WAIT_CAP * wait
        while rows < room and not self._held:
            left = deadline - time.monotonic()
            gap = left if not taken else min(wait, left)
            try:
                item = self._queue.get(timeout=gap) if gap > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None or not jobs_lib.fits(item.job, key, mode, p, m, self.max_seq_len):
                self._held.append(item)
                break
            if not item.future.set_running_or_notify_cancel():
                self.stats["skipped"] += 1
                continue
            taken.append(item)
            rows += item.job.n
        return taken

    def _run(self, call: jobs_lib.Call, key: tuple, group: Sequence[jobs_lib.Pending]) -> None:
        """One sampler call; jobs of the same key join it while it runs (`_joiners`)."""
        prompts, modes, limits = [], [], []
        for p in group:
            for q, mode, limit in call.add(p):
                prompts.append(q)
                modes.append(mode)
                limits.append(limit)
        first = group[0].job
        room = self.max_seq_len - max(len(q) for q in prompts)
        length = tokens_bucket(max(p.job.max_tokens for p in group), room)
        if isinstance(first.method, sampling_methods.Sample) and first.seed is not None:
            rng = seed_key(first.seed)
        else:
            rng = jax.random.fold_in(self._key, self._calls)
        self._calls += 1
        hooks: dict = {"on_tokens": call.tokens, "token_rows": call.streamed, "max_tokens": limits}
        if len(key) == 1:  # greedy, or sampled without a seed: others may join
            with self._lock:
                longest = max(self._prompt_lens, default=0)
                expected = self.active  # admitted requests: under load, joiners are coming
            own = max(len(q) for q in prompts)
            # Under load the prompt bucket fits recent prompts, so that they can join.
            bucket = decoding.prompt_bucket(max(own, longest) if expected > len(group) else own)

            slots = min(self.max_batch, max(len(prompts), expected))
            capacity = hosts.pow2_bucket(slots, cap=self.max_batch)

            resized = False

            def more(room: int):
                nonlocal resized
                load = self.active
                if (capacity < self.max_batch and load > capacity) or load * 4 <= capacity:
                    # More requests than this call has slots, or far fewer: let it
                    # drain, so that the next call is sized for the load.
                    self.stats["resized"] += not resized
                    resized = True
                    return []
                # Under load an emptied call waits for the clients it answered
                # to come back, rather than ending and starting anew.
                wait = self.batch_wait_s if room >= capacity and self._last_jobs > 1 else 0.0
                rows = []
                for p in self._joiners(key, first.mode, bucket, length, room, wait):
                    rows += call.add(p)
                    self.stats["joined"] += 1
                return rows

            hooks.update(more=more, prompt_bucket=bucket, num_slots=slots)
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self._sample(prompts, modes, first.method, length, rng, call.finish, **hooks)
        self.stats["busy_s"] += time.perf_counter() - t0
        self.stats["host_cpu_s"] += time.thread_time() - cpu0  # the worker's own Python time
        self.stats["calls"] += 1
        self.stats["rows"] += len(call.owner)
        self.stats["jobs"] += len(call.jobs)
