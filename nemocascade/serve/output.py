"""Generated ids -> the texts of a response, and the same texts as stream deltas.

`chat_texts` is the reasoning parser (see `protocol`'s docstring for the
rules). `deltas` cuts the final texts into token-sized pieces: after each
generated token it emits whatever the texts of the ids so far share with
the final texts and has not been sent yet. The concatenated deltas are the
final texts exactly, by construction, even where a prefix decodes
differently (a byte-fallback character split over tokens, a stop string
still forming, whitespace that strip() removes until more text follows).

While a row decodes, its final texts are unknown: `Stream` emits, after each
batch of new ids, the part of each text that no later token can change
(`stable_chat`, `stable_completion`), then at the end what remains of the
final texts. A tail is held back while it could still change: a
byte-fallback character being completed, trailing whitespace, the start of
a stop string or of the `</think>` tag. The thinking is streamed once the
think block is open (before that the text could still be dropped, or become
the answer if no `</think>` ever comes); the answer once it is closed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.rollout import modes as modes_lib
from nemocascade.serve import protocol


@dataclasses.dataclass(frozen=True)
class Texts:
    reasoning: str | None
    content: str | None
    stopped_by_string: bool


def _end(ids: Sequence[int], stop_ids: Sequence[int]) -> int:
    return next((n for n, i in enumerate(ids) if i in stop_ids), len(ids))


def chat_texts(tok, ids: Sequence[int], mode: modes_lib.Mode, stops: Sequence[str]) -> Texts:
    """(reasoning_content, content) of a chat choice; content cut at `stops`."""
    if mode.name == "instruct":
        reasoning, content = None, tok.decode(list(ids[: _end(ids, mode.stop_ids)])).strip()
    else:
        parsed = mode.parser(ids)
        reasoning, content = parsed["thinking"] or "", parsed["answer"]
    content, cut = protocol.cut_at_stop(content, stops)
    return Texts(reasoning, content, cut)


def completion_text(tok, ids: Sequence[int], stop_ids: Sequence[int], stops: Sequence[str]):
    """(text, stopped_by_string) of a raw completion: decoded up to the stop token."""
    text, cut = protocol.cut_at_stop(tok.decode(list(ids[: _end(ids, stop_ids)])), stops)
    return text, cut


def reasoning_tokens(ids: Sequence[int], mode: modes_lib.Mode) -> int | None:
    """Tokens of the think block, `</think>` included (all of them while it is open)."""
    if mode.name == "instruct":
        return None
    ids = list(ids)
    return ids.index(mode.think_end_id) + 1 if mode.think_end_id in ids else len(ids)


def _shared(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def deltas(texts_of, ids: Sequence[int], final: dict[str, str | None]) -> list[tuple[str, str]]:
    """[(field, piece)] in order; `texts_of(prefix_ids)` -> {field: text or None}.

    Joining the pieces of each field gives `final[field]` (absent None fields
    yield no piece).
    """
    sent = dict.fromkeys(final, 0)
    out: list[tuple[str, str]] = []

    def emit(field: str, upto: int) -> None:
        if upto > sent[field]:
            out.append((field, final[field][sent[field] : upto]))
            sent[field] = upto

    for i in range(1, len(ids) + 1):
        now = texts_of(ids[:i])
        for field, target in final.items():
            if target is not None and now.get(field) is not None:
                emit(field, _shared(now[field], target))
    for field, target in final.items():
        if target is not None:
            emit(field, len(target))
    return out


def _held(text: str, partials: Sequence[str], strip: bool) -> str:
    """`text` less the tail that later tokens could change (see the module docstring)."""
    end = len(text)
    for s in partials:  # the earliest start of a suffix that begins one of `partials`
        for j in range(max(0, len(text) - len(s) + 1), end):
            if s.startswith(text[j:]):
                end = j
                break
    text = text[:end].rstrip("\ufffd")
    return text.rstrip() if strip else text


def _stable_answer(text: str, stops: Sequence[str], strip: bool) -> str:
    text = text.lstrip() if strip else text
    cut, _ = protocol.cut_at_stop(text, stops)
    return _held(text, stops, strip)[: len(cut)]


def stable_chat(tok, ids: Sequence[int], mode: modes_lib.Mode, stops: Sequence[str]) -> dict:
    """The parts of `chat_texts(ids)` that stay as they are whatever ids follow.

    {"content": ..., "reasoning_content": ...} (thinking modes), a field None
    while none of it is certain yet.
    """
    if mode.name == "instruct":
        return {
            "content": _stable_answer(
                tok.decode(list(ids[: _end(ids, mode.stop_ids)])), stops, True
            )
        }
    text = mode.parser(ids)["completion"]
    close = text.find(tokenizer_lib.THINK_CLOSE)
    if close >= 0:
        reasoning, _ = chat_template.split_thinking(text)
        answer = text[close + len(tokenizer_lib.THINK_CLOSE) :]
        return {"content": _stable_answer(answer, stops, True), "reasoning_content": reasoning}
    start = text.find(tokenizer_lib.THINK_OPEN)
    if start < 0:
        return {"content": None, "reasoning_content": None}
    thinking = text[start + len(tokenizer_lib.THINK_OPEN) :].lstrip()
    return {
        "content": None,
        "reasoning_content": _held(thinking, [tokenizer_lib.THINK_CLOSE], True),
    }


def stable_completion(tok, ids: Sequence[int], stop_ids: Sequence[int], stops: Sequence[str]):
    """The part of `completion_text(ids)` that stays as it is whatever ids follow."""
    return {"text": _stable_answer(tok.decode(list(ids[: _end(ids, stop_ids)])), stops, False)}


class Stream:
    """Deltas of one choice while its ids grow; their concatenation is the final texts.

    `update(ids)` -> [(field, piece)] of newly certain text (`stable_of(ids)`);
    `finish(final)` -> the pieces that complete each field of `final`.
    """

    def __init__(self, stable_of):
        self.stable_of = stable_of
        self.sent: dict[str, str] = {}

    def _emit(self, field: str, text: str | None) -> list[tuple[str, str]]:
        sent = self.sent.get(field, "")
        if text is None or len(text) <= len(sent) or not text.startswith(sent):
            return []
        self.sent[field] = text
        return [(field, text[len(sent) :])]

    def update(self, ids: Sequence[int]) -> list[tuple[str, str]]:
        now = self.stable_of(ids)
        return [
            piece for field in sorted(now, reverse=True) for piece in self._emit(field, now[field])
        ]

    def finish(self, final: dict[str, str | None]) -> list[tuple[str, str]]:
        out = []
        for field in sorted(final, reverse=True):
            target, sent = final[field], self.sent.get(field, "")
            if target is None:
                continue
            if not target.startswith(sent):  # cannot be taken back: say so, send the rest
                logging.warning("stream of %s diverged from the final text", field)
                sent = sent[: _shared(sent, target)]
            out += [(field, target[len(sent) :])] if len(target) > len(sent) else []
            self.sent[field] = target
        return out
