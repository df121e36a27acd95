"""Continuous batching: a fixed set of decode slots, refilled as rows finish.

`generate` has the signature and the result (`decoding.Rollout`) of
`decoding.generate`, plus the engine's knobs. Instead of decoding every
request in one batch until its slowest row ends, it keeps `num_slots` rows in
flight: the device runs a jitted decode chunk of up to `chunk_steps` steps
(a `while_loop` that also stops once no slot is active); between chunks the
host reads one `[S]` bool vector (which slots finished), pulls the finished
rows' outputs, and admits pending requests into the freed slots (one jitted
prefill + scatter). The host work between chunks is O(slots), not O(tokens).
This module is that host loop; the slots' device state and the jitted
functions over it are `slots.py`.

Layout. Every slot row of the cache has the static sampler's layout: the
prompt left-padded to the bucket P of the longest prompt at cache slots
[0, P), completion token j at slot P + j. Slots sit at different completion
indices, so the decode step writes each row at its own cache slot (the
model's per-row `cache_index`). A newly admitted request overwrites [0, P) of
its row; the previous occupant's completion entries past that are never read,
because a query at slot P + j attends only slots <= P + j, all rewritten by
then.

Equivalence. The per-step rules are `decode_step.advance`, the same function
the static sampler runs, and a row's random key depends only on (request
index, completion index); so for the same `rng` the tokens and log-probs equal
`decoding.generate`'s, whatever slot a request lands in (up to float32
summation order, which can differ with the cache length).

Shared prefill. Requests admitted together whose prompts are identical (the
`group_size` rollouts of one RL prompt) are prefilled once; the prompt's KV
rows are copied into each of their slots (`share_prefill`).

Serving hooks (both optional; without them the host loop does nothing more).
`more(room)` is polled between chunks while slots are free: it returns
further `Request`s, which join the running call (indices after the ones
given so far) and are admitted into free slots like the initial ones; they
must fit the call's prompt bucket P (`prompt_bucket` may ask for a larger P
than the initial prompts need, so that longer ones can join) and its
`max_new_tokens`, and they share its sampling method and RNG (row keys stay
(request index, completion index): a joined greedy row gets the tokens it
would get alone). `on_tokens(indices, tokens, lengths)` reports after each
chunk the tokens decoded so far of the live rows that `token_rows` selects
(only those rows are read back); rows that finished in the chunk go to
`on_finish` instead.

Compiles: the prefill is keyed by a power-of-two count of unique prompts, the
harvest (and the token read-back) by a power-of-two count of rows; the decode
chunk once.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from nemocascade.model import presets
from nemocascade.rollout import decoding, request_table, sampling_methods, slots as slots_lib
from nemocascade.sharding import hosts, rules as rules_lib

Request = request_table.Request  # a request joining a running call (`more`)

DEFAULT_SLOTS = 64
DEFAULT_CHUNK_STEPS = 16


def _padded(values: Sequence[int], size: int, fill: int) -> np.ndarray:
    out = np.full((size,), fill, np.int32)
    out[: len(values)] = values
    return out


def generate(
    params: Any,
    model_cfg: presets.ModelConfig,
    prompts: Sequence[Sequence[int]],
    *,
    method: sampling_methods.Method,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    rng: jax.Array,
    thinking_budget: int | None | Sequence[int | None] = None,
    think_close_ids: Sequence[int] = (),
    think_end_id: int | None = None,
    answer_budget: int | None | Sequence[int | None] = None,
    pad_id: int = 0,
    mesh: jax.sharding.Mesh | None = None,
    rules: rules_lib.Rules | None = None,
    num_slots: int = DEFAULT_SLOTS,
    chunk_steps: int = DEFAULT_CHUNK_STEPS,
    share_prefill: bool = True,
    on_finish: Callable[[np.ndarray, decoding.Rollout], None] | None = None,
    stats: dict | None = None,
    more: Callable[[int], Sequence[Request]] | None = None,
    prompt_bucket: int = 0,
    on_tokens: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    token_rows: Callable[[np.ndarray], np.ndarray] | None = None,
    max_tokens: Sequence[int | None] | None = None,
) -> decoding.Rollout:
    """`decoding.generate`'s rollout, decoded with `num_slots` continuously refilled slots.

    `on_finish(indices, rows)` is called on the host as requests finish (their
    request indices and their rows as a `Rollout`), while the rest decode.
    `stats`, when given, receives the engine's counters and seconds
    (`prefill_s` waits for each prefill to finish, adding a sync).

    Serving hooks (module docstring): `more(room)` returns requests that join
    the call (at most about `room` are admitted at once; more wait in the
    call's queue); with it the call keeps `num_slots` slots (not fewer for
    fewer prompts) and the rollout also holds the joined requests, after the
    given ones. `prompt_bucket` is a lower bound on the prompt bucket P.
    `on_tokens(indices, tokens [k, M], lengths [k])` gets the tokens so far of
    the live rows, after every chunk; `token_rows(indices)` picks the request
    indices to read back (default: all live rows). `max_tokens` (per request,
    None = `max_new_tokens`) releases a row's slot once it has that many
    tokens; the row then reads as truncated there, as if decoded alone with
    that `max_new_tokens`.
    """
    if num_slots <= 0 or chunk_steps <= 0:
        raise ValueError(f"num_slots and chunk_steps must be > 0, got {num_slots}, {chunk_steps}")
    if mesh is not None and jax.process_count() > 1:
        raise ValueError("the continuous engine runs on a single-process mesh")
    n = len(prompts)
    lengths, budget, answer, ids = decoding.request_arrays(
        model_cfg,
        prompts,
        max_new_tokens=max_new_tokens,
        stop_ids=stop_ids,
        thinking_budget=thinking_budget,
        think_close_ids=think_close_ids,
        think_end_id=think_end_id,
        answer_budget=answer_budget,
        pad_id=pad_id,
    )
    budgets_allowed = bool(think_close_ids) and think_end_id is not None
    if more is not None and budgets_allowed:
        # A joining row may bring a thinking budget: forcing is armed for the
        # whole call (rows without a budget are never forced either way).
        ids = {**ids, "num_close": np.int32(len(think_close_ids)), "end": np.int32(think_end_id)}
    m = int(max_new_tokens)
    p = decoding.prompt_bucket(max(int(lengths.max()), int(prompt_bucket)))
    dp = 1
    if mesh is not None:
        rules = rules or rules_lib.get_rules("decode")
        dp = hosts.local_batch_shards(mesh, rules)
    s = hosts.pow2_bucket(num_slots if more is not None else min(num_slots, n), dp)
    table = request_table.Table(prompts, lengths, budget, answer, max_tokens, p, m, int(pad_id))
    static = slots_lib.Static(
        model_cfg=model_cfg,
        method=method,
        max_new_tokens=m,
        prompt_len=p,
        pad_id=int(pad_id),
        chunk_steps=int(chunk_steps),
        rules=rules if mesh is not None else None,
    )
    counters = collections.Counter()
    scope = jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()
    with scope:
        slots = slots_lib.empty(model_cfg, s, p, m, pad_id, mesh, rules)
        occupant = np.full((s,), -1, np.int64)  # request index per slot, -1 = free
        steps = np.zeros((s,), np.int64)  # tokens of the slot's row (exact while it decodes)
        pending = collections.deque(range(n))
        start = time.perf_counter()

        def join() -> None:
            room = int((occupant < 0).sum()) - len(pending)
            if more is None or room <= 0:
                return
            new = more(room)
            if new:
                pending.extend(table.join(new, model_cfg.max_seq_len, budgets_allowed))
                counters["joined"] += len(new)

        def admit(slots):
            free = np.flatnonzero(occupant < 0)[: len(pending)]
            if not len(free):
                return slots
            prompt_np, lengths = table.prompt_np, table.lengths
            reqs = [pending.popleft() for _ in free]
            keys = [prompt_np[r].tobytes() if share_prefill else r for r in reqs]
            unique = list(dict.fromkeys(keys))
            first = {k: reqs[keys.index(k)] for k in unique}
            u = hosts.pow2_bucket(len(unique))
            prompt_up = np.full((u, p), pad_id, np.int32)
            pad_u = np.full((u,), p, np.int32)
            for j, k in enumerate(unique):
                prompt_up[j] = prompt_np[first[k]]
                pad_u[j] = p - lengths[first[k]]
            src = [unique.index(k) for k in keys]
            t0 = time.perf_counter()
            slots = slots_lib.admit_jit(
                params,
                slots,
                prompt_up,
                pad_u,
                _padded(src, s, 0),
                _padded(free, s, s),
                _padded(reqs, s, 0),
                _padded(table.budget[reqs], s, 0),
                _padded(table.answer[reqs], s, 0),
                static=static,
            )
            if stats is not None:
                jax.block_until_ready(slots.step_s)
                counters["prefill_s"] += time.perf_counter() - t0
            occupant[free] = reqs
            steps[free] = 0
            counters["prefill_prompts"] += len(unique)
            counters["admitted"] += len(reqs)
            return slots

        def report_tokens(slots, done) -> None:
            live = np.setdiff1d(np.flatnonzero(occupant >= 0), done)
            if token_rows is not None and len(live):
                live = live[np.isin(occupant[live], token_rows(occupant[live]))]
            if not len(live):
                return
            h = min(hosts.pow2_bucket(len(live)), s)
            tokens, steps = jax.device_get(slots_lib.peek_jit(slots, _padded(live, h, s)))
            on_tokens(occupant[live], tokens[: len(live)], steps[: len(live)])

        join()
        slots = admit(slots)
        while (occupant >= 0).any():
            slots, finished = slots_lib.chunk_jit(params, slots, ids, rng, static=static)
            counters["chunks"] += 1
            done = np.flatnonzero(np.asarray(jax.device_get(finished)))
            # A row still decoding ran every step of the chunk (it stops early only
            # once no row is active): its token count is known without a read.
            steps[occupant >= 0] += chunk_steps
            cut = np.flatnonzero((occupant >= 0) & (steps >= table.limit[occupant]))
            cut = np.setdiff1d(cut, done)
            if on_tokens is not None:
                report_tokens(slots, np.union1d(done, cut))
            done = np.union1d(done, cut).astype(np.int64)
            if len(done):
                h = min(hosts.pow2_bucket(len(done)), s)
                rows, slots = slots_lib.harvest_jit(slots, _padded(done, h, s))
                rows = jax.device_get(rows)
                reqs = occupant[done]
                for k, v in rows.items():
                    table.out[k][reqs] = v[: len(done)]
                counters["cut"] += table.cut(reqs)
                occupant[done] = -1
                if on_finish is not None:
                    on_finish(reqs, _rollout(table.out, table.prompt_np, table.lengths, reqs))
            join()
            slots = admit(slots)
        counters["total_s"] += time.perf_counter() - start
    if stats is not None:
        stats.update(counters, slots=s, prompt_bucket=p)
    return _rollout(table.out, table.prompt_np, table.lengths, np.arange(len(table)))


def _rollout(out: dict, prompt_np: np.ndarray, lengths: np.ndarray, idx) -> decoding.Rollout:
    mask = out["completion_mask"][idx]
    return decoding.Rollout(
        prompt_tokens=prompt_np[idx],
        prompt_lengths=lengths[idx],
        completion_tokens=out["completion_tokens"][idx],
        completion_mask=mask,
        logprobs=out["logprobs"][idx],
        forced_mask=out["forced_mask"][idx],
        lengths=mask.sum(axis=-1).astype(np.int32),
        truncated=~out["stopped"][idx],
    )
