"""Streamed deltas: only text no later token changes, and they add up to the final texts."""

import random

import pytest

from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.rollout import modes
from nemocascade.serve import output

TEXTS = [
    "<think>\nLet me add: 12 + 30 = 42. Héllo wörld ✓ 日本</think>\n\nThe answer is 42.",
    "Plain answer with   spaces and a stop: STOP here.",
    "pre text <think> inner </thi nk> still thinking</think> done  <|im_end|>",
    "</think> closed without opening, then é",
    "<think> never closed, ends mid-character 日",
]
STOPS = [[], ["STOP"], ["e", "a"], ["</think>"]]


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


def _stream(stable_of, ids, step):
    stream, pieces, updates = output.Stream(stable_of), [], 0
    for n in range(step, len(ids) + step, step):
        got = stream.update(ids[:n])
        updates += bool(got)
        pieces += got
    return stream, pieces, updates


def _joined(pieces):
    out = {}
    for field, piece in pieces:
        out[field] = out.get(field, "") + piece
    return out


@pytest.mark.parametrize("mode_name", ["thinking", "instruct"])
def test_chat_stream_adds_up_to_the_final_texts(tok, mode_name):
    mode = modes.get(mode_name, tok)
    rng = random.Random(0)
    for text in TEXTS:
        ids = tok.encode(text)
        for stops in STOPS:
            t = output.chat_texts(tok, ids, mode, stops)
            final = {"content": t.content}
            if mode_name == "thinking":
                final["reasoning_content"] = t.reasoning
            for step in (1, 3, rng.randint(2, 9)):
                stream, pieces, _ = _stream(
                    lambda x, stops=stops: output.stable_chat(tok, x, mode, stops), ids, step
                )
                before = _joined(pieces)
                for field, sent in before.items():  # never more than the final text says
                    assert (final[field] or "").startswith(sent), (text, stops, field)
                joined = _joined(pieces + stream.finish(final))
                assert joined == {k: v for k, v in final.items() if v}, (text, stops, step)


def test_thinking_streams_reasoning_then_content_before_the_end(tok):
    mode = modes.get("thinking", tok)
    ids = tok.encode(TEXTS[0])
    _, pieces, updates = _stream(lambda x: output.stable_chat(tok, x, mode, []), ids, 4)
    fields = [f for f, _ in pieces]
    assert fields.count("reasoning_content") > 1 and fields.count("content") > 1
    assert fields.index("content") > max(
        i for i, f in enumerate(fields) if f == "reasoning_content"
    )
    assert updates > 4


def test_completion_stream_keeps_whitespace_and_holds_a_forming_stop(tok):
    ids = tok.encode("abc  STO")
    stop_ids = modes.get("instruct", tok).stop_ids
    stable = output.stable_completion(tok, ids, stop_ids, ["STOP"])
    assert stable == {"text": "abc  "}
    stream, pieces, _ = _stream(
        lambda x: output.stable_completion(tok, x, stop_ids, ["STOP"]), ids, 2
    )
    final, _ = output.completion_text(tok, ids, stop_ids, ["STOP"])
    assert _joined(pieces + stream.finish({"text": final})) == {"text": final}
