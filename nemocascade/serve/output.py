"""Generated ids -> the texts of a response, and the same texts as stream deltas.

`chat_texts` is the reasoning parser (see `protocol`'s docstring for the
rules). `deltas` cuts the final texts into token-sized pieces: after each
generated token it emits whatever the texts of the ids so far share with
the final texts and has not been sent yet. The concatenated deltas are the
final texts exactly, by construction, even where a prefix decodes
differently (a byte-fallback character split over tokens, a stop string
still forming, whitespace that strip() removes until more text follows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

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
