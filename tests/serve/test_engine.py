"""The engine over both samplers: same rows for the same key, jobs answered as their rows finish."""

import threading

import numpy as np
import pytest

from nemocascade.rollout import decoding, sampling_methods, slots
from nemocascade.serve import engine as engine_lib
from tests.serve import helpers

GREEDY = sampling_methods.Greedy()
SAMPLE = sampling_methods.Sample(temperature=1.0, top_k=0, top_p=1.0)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    stage_dir, params = helpers.export_toy(tmp_path_factory.mktemp("run"))
    model, engine = helpers.load(stage_dir)
    engine.close()
    return model, params


def _outputs(model, params, engine: str, jobs) -> list[list[engine_lib.Output]]:
    sample = engine_lib.sampler_fn(
        params, helpers.CFG, model.tok.pad_id, engine=engine, num_slots=4, chunk_steps=3
    )
    eng = engine_lib.Engine(sample, model.max_seq_len, max_batch=16, batch_wait_s=0.05)
    try:
        # Queued before the worker's first wait ends, so they share calls.
        futures = [eng.submit(j) for j in jobs]
        return [f.result(timeout=300) for f in futures]
    finally:
        eng.close()


def test_continuous_and_static_engines_give_the_same_rows(toy):
    model, _ = toy
    thinking, instruct = model.mode("medium"), model.mode("none")

    def prompt(mode, text):
        return tuple(mode.prompt(model.tok, [{"role": "user", "content": text}]))

    jobs = [
        engine_lib.Job(prompt(thinking, "Compute 12 + 30."), thinking, GREEDY, max_tokens=20, n=2),
        engine_lib.Job(prompt(instruct, "Say hi."), instruct, GREEDY, max_tokens=7),
        engine_lib.Job(prompt(thinking, "Add 2 and 5."), thinking, SAMPLE, 20, n=3, seed=1234),
        engine_lib.Job(prompt(instruct, "Name a prime."), instruct, SAMPLE, max_tokens=9, n=2),
    ]
    # 6 slots' worth of rows in 4 slots: the continuous engine refills slots.
    cont = _outputs(model, toy[1], "continuous", jobs)
    static = _outputs(model, toy[1], "static", jobs)
    assert cont == static
    assert [len(rows) for rows in cont] == [2, 1, 3, 2]
    for job, rows in zip(jobs, cont, strict=True):
        assert all(len(r.token_ids) <= job.max_tokens for r in rows)
    assert cont[2][0].token_ids != cont[2][1].token_ids  # rows of one seed differ


def _rollout(tokens: list[list[int]]) -> decoding.Rollout:
    b, m = len(tokens), max(len(t) for t in tokens)
    ids = np.zeros((b, m), np.int32)
    mask = np.zeros((b, m), np.int32)
    for i, t in enumerate(tokens):
        ids[i, : len(t)], mask[i, : len(t)] = t, 1
    return decoding.Rollout(
        prompt_tokens=np.zeros((b, 1), np.int32),
        prompt_lengths=np.ones((b,), np.int32),
        completion_tokens=ids,
        completion_mask=mask,
        logprobs=np.zeros((b, m), np.float32),
        forced_mask=np.zeros((b, m), np.int32),
        lengths=mask.sum(-1).astype(np.int32),
        truncated=np.zeros((b,), bool),
    )


def test_a_job_is_answered_when_its_rows_finish_not_when_the_call_ends(toy):
    model, _ = toy
    busy, go, second_half = threading.Event(), threading.Event(), threading.Event()

    def sample(prompts, modes, method, max_new_tokens, rng, on_finish, **hooks):
        if prompts == [[0]]:  # the first call holds the worker until a and b are queued
            busy.set()
            assert go.wait(30)
            on_finish(np.array([0]), _rollout([[4]]))
            return
        # Job a's rows (0 and 1) finish first; job b's row 2 only after the gate.
        on_finish(np.array([1]), _rollout([[7, 8]]))
        on_finish(np.array([0]), _rollout([[5]]))
        assert second_half.wait(30)
        on_finish(np.array([2]), _rollout([[9, 9, 9]]))

    eng = engine_lib.Engine(sample, model.max_seq_len, max_batch=8, batch_wait_s=0.05)
    try:
        mode = model.mode("none")
        first = eng.submit(engine_lib.Job((0,), mode, GREEDY, max_tokens=4))
        assert busy.wait(30)
        a = eng.submit(engine_lib.Job((1, 2), mode, GREEDY, max_tokens=4, n=2))
        b = eng.submit(engine_lib.Job((3,), mode, GREEDY, max_tokens=2))
        go.set()
        assert first.result(timeout=30) == [engine_lib.Output([4], False)]
        rows_a = a.result(timeout=30)  # while a and b's call still runs
        assert not b.done()
        assert rows_a == [engine_lib.Output([5], False), engine_lib.Output([7, 8], False)]
        second_half.set()
        # b's row was cut at its max_tokens: reported as truncated.
        assert b.result(timeout=30) == [engine_lib.Output([9, 9], True)]
        eng.close()  # the call's counters are updated after its last row is reported
        assert eng.stats["calls"] == 2 and eng.stats["jobs"] == 3 and eng.stats["tokens"] == 6
    finally:
        go.set()
        second_half.set()
        eng.close()


def _engine(model, params, **kw):
    sample = engine_lib.sampler_fn(
        params, helpers.CFG, model.tok.pad_id, num_slots=4, chunk_steps=4
    )
    return engine_lib.Engine(sample, model.max_seq_len, max_batch=4, **kw)


def test_a_request_joins_a_running_call_and_finishes_first(toy):
    model, params = toy
    mode = model.mode("none")
    long_prompt = tuple(mode.prompt(model.tok, [{"role": "user", "content": "Tell a story."}]))
    short_prompt = tuple(mode.prompt(model.tok, [{"role": "user", "content": "Say hi."}]))
    short = engine_lib.Job(short_prompt, mode, GREEDY, max_tokens=6)
    started, submitted, checked = threading.Event(), threading.Event(), threading.Event()
    streamed, pending = [], []

    def on_tokens(k, ids):  # on the worker thread, between two chunks of the long call
        streamed.append(list(ids))
        started.set()
        assert submitted.wait(60)  # the short request is queued before the call goes on
        if pending[0].done():  # hold the long call until the test has looked
            assert checked.wait(60)

    eng = _engine(model, params)
    try:
        for _ in range(2):  # two admitted requests: the call keeps a slot free for one
            eng.acquire()
        long = eng.submit(engine_lib.Job(long_prompt, mode, GREEDY, max_tokens=120), on_tokens)
        assert started.wait(300)  # the long call decodes
        pending.append(eng.submit(short))
        submitted.set()
        joined = pending[0].result(timeout=300)
        assert not long.done()  # answered while the long call still runs
        checked.set()
        (long_row,) = long.result(timeout=300)
        eng.close()
        assert eng.stats["calls"] == 1 and eng.stats["joined"] == 1
    finally:
        eng.close()
    # The stream saw growing prefixes of the long row; the joiner got its lone tokens.
    assert len(streamed) > 2 and len(long_row.token_ids) > 20
    assert all(s == long_row.token_ids[: len(s)] for s in streamed)
    alone = _engine(model, params)
    try:
        assert joined == alone.submit(short).result(timeout=300)
    finally:
        alone.close()


def test_a_seeded_sampled_call_takes_no_joiners(toy):
    model, params = toy
    mode = model.mode("none")
    prompt = tuple(mode.prompt(model.tok, [{"role": "user", "content": "Say hi."}]))
    started = threading.Event()
    eng = _engine(model, params)
    try:
        for _ in range(2):
            eng.acquire()
        seeded = engine_lib.Job(prompt, mode, SAMPLE, max_tokens=60, seed=3)
        submitted = threading.Event()

        def on_tokens(k, ids):
            started.set()
            assert submitted.wait(60)

        first = eng.submit(seeded, on_tokens)
        assert started.wait(300)
        other = eng.submit(engine_lib.Job(prompt, mode, GREEDY, max_tokens=6))
        submitted.set()
        other.result(timeout=300)
        first.result(timeout=300)
        eng.close()
        assert eng.stats["calls"] == 2 and eng.stats["joined"] == 0
    finally:
        eng.close()


def test_warmup_compiles_the_admission_of_joiners(toy):
    model, params = toy
    mode = model.mode("none")
    eng = _engine(model, params)
    try:
        assert eng.warmup(mode, GREEDY, max_tokens=16, prompt_len=16) == 4  # 3 sizes + joining
        sizes = (slots.admit_jit._cache_size(), slots.chunk_jit._cache_size())
        for _ in range(4):  # a loaded call: 4 slots; requests join it one by one
            eng.acquire()
        started, go = threading.Event(), threading.Event()

        def hold(k, ids):
            started.set()
            assert go.wait(60)

        prompt = (mode.stop_ids[0],) * 15 + (77,)
        first = eng.submit(engine_lib.Job(prompt, mode, GREEDY, max_tokens=16), hold)
        assert started.wait(300)
        later = [eng.submit(engine_lib.Job(prompt[:-1] + (78,), mode, GREEDY, max_tokens=4))]
        go.set()
        later[0].result(timeout=300)
        first.result(timeout=300)
        eng.close()
        assert eng.stats["joined"] == 1
        assert (slots.admit_jit._cache_size(), slots.chunk_jit._cache_size()) == sizes
    finally:
        go.set()
        eng.close()


def test_a_call_sized_for_a_burst_takes_no_joiners_once_the_load_falls(toy):
    model, params = toy
    mode = model.mode("none")
    prompt = tuple(mode.prompt(model.tok, [{"role": "user", "content": "Say hi."}]))
    started, go = threading.Event(), threading.Event()

    def hold(k, ids):
        started.set()
        assert go.wait(60)

    eng = _engine(model, params)
    try:
        for _ in range(4):  # a burst: the call gets 4 slots
            eng.acquire()
        first = eng.submit(engine_lib.Job(prompt, mode, GREEDY, max_tokens=40), hold)
        assert started.wait(300)
        for _ in range(3):  # the burst is answered: one admitted request is left
            eng.release()
        lone = eng.submit(engine_lib.Job(prompt, mode, GREEDY, max_tokens=6))
        go.set()
        lone.result(timeout=300)
        first.result(timeout=300)
        eng.close()
        # The lone request waited for a call of its own size instead of joining.
        assert eng.stats["calls"] == 2 and eng.stats["joined"] == 0
        assert eng.stats["resized"] == 1
    finally:
        go.set()
        eng.close()
