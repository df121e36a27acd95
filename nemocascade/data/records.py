"""Real-data records: sources (JSONL, Parquet, saved Hugging Face datasets) and their schema.

Every record is checked when the run starts, before the first step; a bad one
stops the run with `file:line: field 'x': what is wrong` (line = the JSONL
line, or the row number + 1 for Parquet/Arrow). The formats (`docs/data.md`):

* SFT: `{"messages": [{"role": "system"|"user"|"assistant", "content": str,
  "reasoning_content"?: str}, ...]}` — reasoning either in
  `reasoning_content` or as `<think>…</think>` at the start of the content —
  or the task world's `{"prompt", "answer", "thinking"?}`.
* preference pairs: `{"prompt": str | "messages": [...], "chosen", "rejected"}`,
  each side a string, an assistant message, or a conversation whose last
  message is the assistant's.
* RL / evaluation prompts: `{"prompt": str | "messages": [...], "domain",
  <the domain's verification payload>}` (`rewards/verifiers.payload_error`).

Sources are indexed, not loaded: a JSONL file keeps one byte offset per valid
record, a Parquet file reads one row group at a time, so a file larger than
memory streams. Paths are `etils.epath` paths (local, `gs://`, …).
"""

from __future__ import annotations

import array
import bisect
import itertools
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from etils import epath

from nemocascade.tasks import base

KINDS = ("sft", "preference", "rl")
ROLES = ("system", "user", "assistant")


class RecordError(ValueError):
    """A record does not match its schema; the message names file, line and field."""


def _fmt(where: str, field: str, problem: str) -> str:
    return f"{where}: field {field!r}: {problem}"


# ---------------------------------------------------------------------- sources


def _format(path: epath.Path) -> str:
    if path.is_dir():
        return "arrow"
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix in (".jsonl", ".json"):
        return "jsonl"
    raise RecordError(f"{path}: unknown data format (expected .jsonl, .parquet or a saved dataset)")


def _jsonl_rows(path: epath.Path) -> Iterator[tuple[int, int, Any]]:
    """(line number, byte offset, parsed JSON or its decoding error) per non-blank line."""
    offset = 0
    with path.open("rb") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield n, offset, json.loads(line)
                except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
                    yield n, offset, e
            offset += len(line)


def _arrow_files(path: epath.Path) -> list[epath.Path]:
    files = sorted(p for p in path.iterdir() if p.suffix == ".arrow")
    if not files:
        raise RecordError(f"{path}: a directory without .arrow files is not a saved dataset")
    return files


def _read_group(path: epath.Path, fmt: str, g: int):
    """Row group `g` of a Parquet file, or Arrow file `g` of a saved dataset (a pyarrow Table)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if fmt == "parquet":
        with path.open("rb") as f:
            return pq.ParquetFile(f).read_row_group(g)
    with _arrow_files(path)[g].open("rb") as f:
        return pa.ipc.open_stream(f).read_all()


def _num_groups(path: epath.Path, fmt: str) -> int:
    import pyarrow.parquet as pq

    if fmt == "parquet":
        with path.open("rb") as f:
            return pq.ParquetFile(f).metadata.num_row_groups
    return len(_arrow_files(path))


def _group_rows(path: epath.Path, fmt: str) -> list[int]:
    """Rows per group: from the Parquet footer, or by reading each Arrow file once."""
    import pyarrow.parquet as pq

    if fmt == "parquet":
        with path.open("rb") as f:
            meta = pq.ParquetFile(f).metadata
            return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    return [t.num_rows for t in _arrow_tables(path, fmt)]


def _arrow_tables(path: epath.Path, fmt: str):
    """Iterates the row groups (Parquet) or files (saved dataset) as pyarrow Tables."""
    for g in range(_num_groups(path, fmt)):
        yield _read_group(path, fmt, g)


class Source:
    """Random access to the valid records of one file (a grain data source).

    `source[i]` is `(where, record)` with `where` = "file:line".
    """

    def __init__(self, path: str, fmt: str, keys: Sequence[int], lines: Sequence[int]):
        self.path, self.format = str(path), fmt
        self._keys = array.array("q", keys)  # byte offsets (JSONL) or row numbers
        self._lines = array.array("q", lines)  # 1-based line (JSONL) or row numbers
        self._cache: tuple[int, list] | None = None
        self._groups: list[int] | None = None
        self._file = None  # JSONL: one handle, opened on first read (a bucket: one connection)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, i: int) -> tuple[str, dict]:
        key, where = self._keys[i], f"{self.path}:{self._lines[i]}"
        if self.format == "jsonl":
            with self._lock:
                if self._file is None:
                    self._file = epath.Path(self.path).open("rb")
                self._file.seek(key)
                line = self._file.readline()
            return where, json.loads(line)
        with self._lock:
            return where, self._row(key)

    def _row(self, row: int) -> dict:
        """One row, reading only its row group (the last group read stays in memory)."""
        if self._groups is None:
            self._groups = list(
                itertools.accumulate(_group_rows(epath.Path(self.path), self.format))
            )
        g = bisect.bisect_right(self._groups, row)
        if self._cache is None or self._cache[0] != g:
            self._cache = (g, _read_group(epath.Path(self.path), self.format, g).to_pylist())
        first = self._groups[g - 1] if g else 0
        return self._cache[1][row - first]

    def __getstate__(self):
        return {
            "path": self.path,
            "format": self.format,
            "keys": list(self._keys),
            "lines": list(self._lines),
        }

    def __setstate__(self, state):
        self.__init__(state["path"], state["format"], state["keys"], state["lines"])


def scan(path: str) -> Iterator[tuple[int, int, Any]]:
    """(line, key, record or error) for every record of a file, streamed."""
    p = epath.Path(path)
    if not p.exists():
        raise RecordError(f"{path}: no such file")
    fmt = _format(p)
    if fmt == "jsonl":
        yield from _jsonl_rows(p)
        return
    row = 0
    for table in _arrow_tables(p, fmt):
        for rec in table.to_pylist():
            yield row + 1, row, rec
            row += 1


# ---------------------------------------------------------------------- schema


def _need_str(rec: dict, key: str, where: str, allow_empty: bool = False, prefix="") -> str:
    name = f"{prefix}{key}"
    if key not in rec or rec[key] is None:
        raise RecordError(_fmt(where, name, "missing"))
    value = rec[key]
    if not isinstance(value, str):
        raise RecordError(_fmt(where, name, f"must be a string, got {type(value).__name__}"))
    if not allow_empty and not value.strip():
        raise RecordError(_fmt(where, name, "is empty"))
    return value


def check_messages(messages: Any, where: str, field: str = "messages", last: str = "") -> list:
    """A list of {role, content[, reasoning_content]} dicts; `last` = required final role."""
    if not isinstance(messages, list) or not messages:
        raise RecordError(_fmt(where, field, "must be a non-empty list of messages"))
    out = []
    for n, m in enumerate(messages):
        f = f"{field}[{n}]"
        if not isinstance(m, dict):
            raise RecordError(_fmt(where, f, "must be an object with 'role' and 'content'"))
        role = m.get("role")
        if role not in ROLES:
            raise RecordError(_fmt(where, f"{f}.role", f"must be one of {ROLES}, got {role!r}"))
        _need_str(m, "content", where, allow_empty=role == "assistant", prefix=f"{f}.")
        msg = {"role": role, "content": m["content"]}
        if m.get("reasoning_content") is not None:
            if role != "assistant":
                raise RecordError(_fmt(where, f"{f}.reasoning_content", "only on assistant turns"))
            _need_str(m, "reasoning_content", where, allow_empty=True, prefix=f"{f}.")
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    if last and out[-1]["role"] != last:
        raise RecordError(_fmt(where, field, f"must end with a {last} message"))
    return out


def prompt_messages(rec: dict, where: str) -> list[dict]:
    """The conversation of a prompt record (`messages` ending with user, or `prompt`)."""
    if "messages" in rec and rec["messages"] is not None:
        return check_messages(rec["messages"], where, last="user")
    if "prompt" not in rec:
        raise RecordError(_fmt(where, "prompt", "missing (or give 'messages')"))
    return [{"role": "user", "content": _need_str(rec, "prompt", where)}]


def sft_messages(rec: dict, where: str) -> list[dict]:
    if "messages" in rec:
        messages = check_messages(rec["messages"], where)
        if not any(m["role"] == "assistant" for m in messages):
            raise RecordError(_fmt(where, "messages", "has no assistant turn"))
        return messages
    if "prompt" in rec or "answer" in rec:
        answer = {"role": "assistant", "content": _need_str(rec, "answer", where)}
        thinking = rec.get("thinking")
        if thinking:
            answer["reasoning_content"] = _need_str(rec, "thinking", where)
        return [{"role": "user", "content": _need_str(rec, "prompt", where)}, answer]
    raise RecordError(_fmt(where, "messages", "missing (an SFT record needs 'messages')"))


def _response(value: Any, where: str, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return check_messages([value], where, field, last="assistant")[0]["content"]
    if isinstance(value, list):
        return check_messages(value, where, field, last="assistant")[-1]["content"]
    if value is None:
        raise RecordError(_fmt(where, field, "missing"))
    got = type(value).__name__
    raise RecordError(_fmt(where, field, f"must be a string or messages, got {got}"))


def preference_pair(rec: dict, where: str) -> dict:
    """{"messages": prompt conversation, "chosen": str, "rejected": str[, "gold_margin"]}."""
    out = {"messages": prompt_messages(rec, where)}
    for side in ("chosen", "rejected"):
        out[side] = _response(rec.get(side), where, side)
    if "gold_margin" in rec:
        out["gold_margin"] = float(rec["gold_margin"])
    return out


def _payload_error(domain: str, meta: dict) -> str | None:
    from nemocascade.rewards import verifiers

    check = getattr(verifiers, "payload_error", None)
    return check(domain, meta) if check is not None else None


def rl_example(rec: dict, where: str) -> base.Example:
    """An RL / evaluation prompt record as an `Example` (payload in `meta`)."""
    messages = prompt_messages(rec, where)
    domain = rec.get("domain")
    if domain is None and "golden_patch" in rec:
        domain = "swe"  # the released SWE RL records (C1 [HF-SWE]) carry no domain field
    if domain not in base.DOMAINS:
        raise RecordError(_fmt(where, "domain", f"must be one of {base.DOMAINS}, got {domain!r}"))
    skip = ("prompt", "messages", "domain", "difficulty")
    meta = {k: v for k, v in rec.items() if k not in skip}
    problem = _payload_error(domain, meta)
    if problem:
        raise RecordError(f"{where}: {problem}")
    if len(messages) > 1:
        meta["messages"] = messages
    return base.Example(
        uid=where,
        domain=domain,
        difficulty=int(rec.get("difficulty") or 0),
        prompt=messages[-1]["content"],
        thinking="",
        answer="",
        meta=meta,
    )


_CHECKS = {"sft": sft_messages, "preference": preference_pair, "rl": rl_example}


def parse(kind: str, where: str, record: Any):
    """The record checked and normalized for `kind` (RecordError on any problem)."""
    if isinstance(record, json.JSONDecodeError):
        raise RecordError(f"{where}: not valid JSON ({record.msg}, column {record.colno})")
    if isinstance(record, UnicodeDecodeError):
        raise RecordError(f"{where}: not valid UTF-8 (byte {record.start})")
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    return _CHECKS[kind](record, where)


def index(path: str, kind: str, limit: int | None = None, keep=None) -> Source:
    """Checks every record of `path` (streaming) and indexes the valid ones.

    `keep(parsed) -> bool` may drop valid records (e.g. prompts longer than
    the context), which are counted and logged. Raises RecordError on the
    first bad record and on a file without records.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    p = epath.Path(path)
    fmt = _format(p) if p.exists() else None
    keys, lines, dropped = [], [], 0
    for line, key, record in scan(path):
        parsed = parse(kind, f"{path}:{line}", record)
        if keep is not None and not keep(parsed):
            dropped += 1
            continue
        keys.append(key)
        lines.append(line)
        if limit is not None and len(keys) == limit:
            break
    if dropped:
        logging.warning("%s: dropped %d %s records (longer than the context)", path, dropped, kind)
    if not keys:
        note = f" ({dropped} dropped)" if dropped else ""
        raise RecordError(f"{path}: no {kind} records{note}")
    return Source(path, fmt, keys, lines)


def load(source: Source, i: int, kind: str):
    """Record `i` of an indexed source, parsed (it was checked when indexed)."""
    where, record = source[i]
    return parse(kind, where, record)
