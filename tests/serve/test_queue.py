"""The request queue: shared sampler calls, 503 when full, a disconnect frees its slot."""

import threading
import time

import httpx
import openai
import pytest

from nemocascade.serve import engine as engine_lib
from tests.serve import helpers

PROMPT = [{"role": "user", "content": "Compute 12 + 30."}]
GREEDY = {"model": "sft", "messages": PROMPT, "temperature": 0, "max_tokens": 4}


class Gate:
    """Wraps a sampler call so the first one blocks until `open` (engine busy on demand)."""

    def __init__(self, sample):
        self.sample, self.started, self.opened = sample, threading.Event(), threading.Event()

    def __call__(self, *args, **hooks):
        self.started.set()
        assert self.opened.wait(60)
        return self.sample(*args, **hooks)


def _until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    stage_dir, _ = helpers.export_toy(tmp_path_factory.mktemp("run"))
    model, engine = helpers.load(stage_dir)
    engine.close()
    gate = Gate(engine._sample)
    engine = engine_lib.Engine(gate, model.max_seq_len, max_batch=16, max_queue=3)
    with helpers.Serving(model, engine) as s:
        s.gate = gate
        yield s
    gate.opened.set()
    engine.close()


def test_full_queue_503_disconnect_frees_its_slot_and_waiting_requests_batch(gated):
    s, gate = gated, gated.gate
    results = {}

    def post(name):
        results[name] = httpx.post(f"{s.url}/v1/chat/completions", json=GREEDY, timeout=60)

    def active():
        return httpx.get(f"{s.url}/health").json()["active"]

    a = threading.Thread(target=post, args=("a",))
    a.start()
    assert gate.started.wait(30)  # request a is inside the (blocked) sampler call
    client = s.client()
    stream = client.chat.completions.create(**GREEDY, stream=True)
    first = next(iter(stream))  # the role chunk: b is admitted and waits in the queue
    assert first.choices[0].delta.role == "assistant"
    d1 = threading.Thread(target=post, args=("d1",))
    d1.start()
    _until(lambda: active() == 3)
    with pytest.raises(openai.InternalServerError) as e:  # 503: every slot taken
        client.chat.completions.create(**GREEDY)
    assert e.value.status_code == 503 and e.value.code == "queue_full"

    stream.close()  # b disconnects mid-stream: its slot is freed while the engine is still busy
    _until(lambda: active() == 2)
    d2 = threading.Thread(target=post, args=("d2",))
    d2.start()
    _until(lambda: active() == 3)

    gate.opened.set()
    for t in (a, d1, d2):
        t.join(60)
    assert all(results[k].status_code == 200 for k in ("a", "d1", "d2"))
    answers = {results[k].json()["choices"][0]["message"]["content"] for k in ("a", "d1", "d2")}
    assert len(answers) == 1  # same greedy request, same answer
    # A call's counters are updated when it returns (it may wait a moment for joiners).
    _until(lambda: httpx.get(f"{s.url}/health").json()["engine"]["calls"] == 2)
    stats = httpx.get(f"{s.url}/health").json()
    # a's call was sized for a alone: d1 and d2 did not join it (it drained) and
    # shared the next call; b was skipped, never sampled.
    assert stats["engine"]["calls"] == 2 and stats["engine"]["jobs"] == 3
    assert stats["engine"]["joined"] == 0 and stats["engine"]["resized"] == 1
    assert stats["engine"]["skipped"] == 1 and stats["active"] == 0
