"""Token-by-token streaming: deltas leave the server while the engine still decodes.

The sampler is wrapped so that it pauses after a few chunk reports: the
client must already hold several deltas then (they cannot have been cut from
a finished completion), and once decoding resumes the deltas add up to the
non-streamed response.
"""

import threading
import time

import pytest

from nemocascade.serve import engine as engine_lib
from tests.serve import helpers

PROMPT = [{"role": "user", "content": "Tell a long story about rivers."}]


class Pause:
    """The sampler, held inside its call after `after` token reports until `go` is set."""

    def __init__(self, sample, after: int):
        self.sample, self.after, self.reports = sample, after, 0
        self.paused, self.go = threading.Event(), threading.Event()

    def __call__(self, *args, **hooks):
        inner = hooks.get("on_tokens")
        if inner is not None:

            def on_tokens(*a):
                inner(*a)
                self.reports += 1
                if self.reports == self.after:
                    self.paused.set()
                    assert self.go.wait(60)

            hooks["on_tokens"] = on_tokens
        return self.sample(*args, **hooks)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    stage_dir, _ = helpers.export_toy(tmp_path_factory.mktemp("run"))
    model, engine = helpers.load(stage_dir, "--chunk_steps=4")
    engine.close()
    pause = Pause(engine._sample, after=6)
    engine = engine_lib.Engine(pause, model.max_seq_len, max_batch=16)
    with helpers.Serving(model, engine) as s:
        s.pause = pause
        yield s
    pause.go.set()
    engine.close()


@pytest.mark.parametrize("effort", ["low", "none"])
def test_deltas_arrive_while_decoding_and_add_up_to_the_response(served, effort):
    pause = served.pause
    pause.reports, pause.go = 0, threading.Event()
    pause.paused.clear()
    client = served.client()
    kw = dict(model="sft", messages=PROMPT, max_tokens=80, temperature=0, reasoning_effort=effort)
    deltas, ended = [], threading.Event()

    def read():
        for chunk in client.chat.completions.create(**kw, stream=True):
            for c in chunk.choices:
                for name in ("reasoning_content", "content"):
                    piece = getattr(c.delta, name, None)
                    if piece:
                        deltas.append((name, piece))
                if c.finish_reason:
                    deltas.append(("finish", c.finish_reason))
        ended.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert pause.paused.wait(120)  # the engine is held mid-call (24 tokens decoded)
        deadline = time.monotonic() + 30
        while len(deltas) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # ... and the client already holds several deltas of its text, no end yet.
        assert len(deltas) >= 2 and all(n != "finish" for n, _ in deltas), deltas
        assert not ended.is_set()
    finally:
        pause.go.set()
    reader.join(120)
    whole = client.chat.completions.create(**kw).choices[0]  # greedy: the same tokens
    joined = {"content": "", "reasoning_content": ""}
    for name, piece in deltas:
        if name in joined:
            joined[name] += piece
    assert joined["content"] == (whole.message.content or "")
    assert joined["reasoning_content"] == (getattr(whole.message, "reasoning_content", None) or "")
    assert deltas[-1] == ("finish", whole.finish_reason)
