"""grain input pipelines: SFT, held-out loss, reward-model pairs, RL prompts.

Sources are the built-in task world (`nemocascade.tasks.registry`) or JSONL
files with the same fields. Every training loader is a `Loader`: an iterator
whose position is a JSON-able dict (`get_state` / `set_state`), so a resumed
run sees exactly the batches an uninterrupted one would.

Order of operations (identical on every process, so shards line up):
global shuffle(seed) -> shard `[shard_index::shard_count]` -> repeat(epochs,
reshuffled each epoch) -> render -> pad or pack -> batch. Each process gets a
disjoint `1 / shard_count` of every epoch; `batch_size` is per process.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence

import grain
import numpy as np

from nemocascade.data import chat_template, packing, tokenizer as tokenizer_lib
from nemocascade.tasks import base, registry

# Rendering is cheap; one reader thread keeps the shared CPUs for the model.
_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=64)


class Loader:
    """A checkpointable batch iterator over a grain dataset.

    Attributes:
      epoch_size: items per epoch on this process (sequences, pairs or prompts).
      num_truncated: sequences truncated to the row length since construction.
    """

    def __init__(
        self, dataset: grain.IterDataset, epoch_size: int, counter: _Counter | None = None
    ):
        self._iterator = iter(dataset)
        self.epoch_size = epoch_size
        self._counter = counter

    @property
    def num_truncated(self) -> int:
        return self._counter.value if self._counter else 0

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iterator)

    def get_state(self) -> dict:
        # A JSON round trip guarantees the state can go into any checkpoint.
        return json.loads(json.dumps(self._iterator.get_state()))

    def set_state(self, state: dict) -> None:
        self._iterator.set_state(state)


class _Counter:
    """Counts truncated sequences across reader threads; warns once."""

    def __init__(self, what: str, seq_len: int):
        self._lock = threading.Lock()
        self._what, self._seq_len = what, seq_len
        self.value = 0

    def add(self, truncated: bool) -> None:
        if not truncated:
            return
        with self._lock:
            self.value += 1
            if self.value == 1:
                logging.warning(
                    "%s: truncating sequences longer than seq_len=%d (counted in "
                    "Loader.num_truncated)",
                    self._what,
                    self._seq_len,
                )


def read_jsonl(path: str, limit: int | None = None) -> list[dict]:
    """Records of a JSONL file, in file order (at most `limit`)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
            if limit is not None and len(records) == limit:
                break
    return records


def examples_from_jsonl(path: str, limit: int | None = None) -> list[base.Example]:
    """`{"prompt", "thinking", "answer", "domain"}` records as Examples."""
    return [
        base.Example(
            uid=f"{path}:{n}",
            domain=r.get("domain", "chat"),
            difficulty=int(r.get("difficulty", 0)),
            prompt=r["prompt"],
            thinking=r.get("thinking") or "",
            answer=r["answer"],
            meta=r.get("meta", {}),
        )
        for n, r in enumerate(read_jsonl(path, limit))
    ]


def _task_examples(
    domains, split, num_examples, seed, difficulty=None, weights=()
) -> list[base.Example]:
    """`num_examples` per domain, times the domain's weight when `weights` is given."""
    if num_examples is None:
        raise ValueError("num_examples (per domain) is required for the built-in task world")
    weights = tuple(weights) or (1.0,) * len(domains)
    examples = []
    for domain, w in zip(domains, weights, strict=True):
        n = max(1, round(num_examples * w))
        examples += registry.generate(domain, split, n, seed=seed, difficulty=difficulty)
    return examples


def _sft_items(examples, modes) -> list[tuple[base.Example, str]]:
    """Each example once per mode; the thinking mode only where a trace exists."""
    for mode in modes:
        if mode not in base.MODES:
            raise ValueError(f"modes must be drawn from {base.MODES}, got {mode!r}")
    return [(ex, m) for ex in examples for m in modes if m == "instruct" or ex.thinking]


def _sharded(items: list, seed: int | None, shard_index: int, shard_count: int):
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard_index={shard_index} not in [0, shard_count={shard_count})")
    dataset = grain.MapDataset.source(items)
    if seed is not None:
        dataset = dataset.shuffle(seed=seed)
    return dataset[shard_index::shard_count]


def _sft_dataset(tok, items, seq_len, template, counter) -> grain.MapDataset:
    """Rendered `shift` features of (example, mode) items, unbatched."""

    def render(item):
        tokens, mask = chat_template.render_sft(tok, item[0], item[1], template)
        features, truncated = packing.shift(tokens, mask, seq_len)
        counter.add(truncated)
        return features

    return items.map(render)


def _rows(dataset: grain.MapDataset, seq_len: int, batch_size: int, pack: bool):
    dataset = dataset.to_iter_dataset(_READ_OPTIONS)
    if pack:
        return packing.pack(dataset, seq_len, num_bins=batch_size)
    return dataset.map(lambda features: packing.pad(features, seq_len))


def sft_loader(
    tok: tokenizer_lib.Tokenizer,
    *,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
    domains: Sequence[str] = base.DOMAINS,
    modes: Sequence[str] = base.MODES,
    num_examples: int | None = None,
    path: str | None = None,
    pack: bool = True,
    template: chat_template.Template = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
    num_epochs: int | None = None,
    domain_weights: Sequence[float] = (),
) -> Loader:
    """SFT batches (see `packing`) of every example rendered in every mode.

    Args:
      seq_len: T, the row length (a sequence of T + 1 tokens fits one row).
      batch_size: rows per batch on this process.
      seed: draws the task-world examples and shuffles each epoch.
      pack: first-fit pack several sequences per row (else one per row).
      num_examples: examples per domain from the task world's SFT split, or
        the first `num_examples` records of `path` (all when None).
      path: JSONL file of `{"prompt", "thinking", "answer", "domain"}` records
        instead of the task world.
      num_epochs: passes over the data; None repeats forever.
      domain_weights: per-domain multipliers of `num_examples` (the SFT mix).
    """
    if path is not None:
        examples = examples_from_jsonl(path, num_examples)
    else:
        examples = _task_examples(domains, "sft", num_examples, seed, weights=domain_weights)
    items = _sharded(_sft_items(examples, modes), seed, shard_index, shard_count)
    counter = _Counter("sft_loader", seq_len)
    dataset = _sft_dataset(tok, items.repeat(num_epochs), seq_len, template, counter)
    rows = _rows(dataset, seq_len, batch_size, pack)
    return Loader(rows.batch(batch_size, drop_remainder=True), len(items), counter)


def eval_batches(
    tok: tokenizer_lib.Tokenizer,
    *,
    seq_len: int,
    batch_size: int,
    domains: Sequence[str] = base.DOMAINS,
    modes: Sequence[str] = base.MODES,
    num_examples: int | None = None,
    path: str | None = None,
    seed: int = 0,
    template: chat_template.Template = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
) -> list[dict]:
    """Fixed held-out batches (eval split), one pass, unpacked, in order.

    The last batch is completed with all-padding rows (loss_mask 0), so every
    sequence counts exactly once and every batch has the same shape.
    """
    if path is not None:
        examples = examples_from_jsonl(path, num_examples)
    else:
        examples = _task_examples(domains, "eval", num_examples, seed)
    items = _sharded(_sft_items(examples, modes), None, shard_index, shard_count)
    counter = _Counter("eval_batches", seq_len)
    rows = [packing.pad(f, seq_len) for f in _sft_dataset(tok, items, seq_len, template, counter)]
    empty = {key: np.zeros(seq_len, np.int32) for key in packing.ROW_KEYS}
    rows += [empty] * (-len(rows) % batch_size)
    return [packing.stack(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]


def _answer_only(text: str) -> str:
    """What the RM sees of a response: the answer after any think block."""
    if tokenizer_lib.THINK_CLOSE not in text:
        return text
    return chat_template.split_thinking(text)[1] or ""


def _pair_row(tok, pair, seq_len, template, counter) -> dict:
    row = {"gold_margin": np.float32(pair.get("gold_margin", np.nan))}
    for side in ("chosen", "rejected"):
        ids = chat_template.render_rm_input(tok, pair["prompt"], _answer_only(pair[side]), template)
        counter.add(len(ids) > seq_len)
        ids = ids[:seq_len]
        tokens = np.zeros(seq_len, np.int32)
        tokens[: len(ids)] = ids
        row[f"{side}_tokens"] = tokens
        row[f"{side}_mask"] = (np.arange(seq_len) < len(ids)).astype(np.int32)
        row[f"{side}_last"] = np.int32(len(ids) - 1)
    return row


def preference_loader(
    tok: tokenizer_lib.Tokenizer,
    *,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
    num_pairs: int | None = None,
    noise: float = 0.1,
    split: str = "sft",
    path: str | None = None,
    template: chat_template.Template = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
    num_epochs: int | None = None,
) -> Loader:
    """Reward-model pairs as `chat_template.render_rm_input` sequences.

    Batch keys: `{chosen,rejected}_tokens` [B, T] (0-padded), `{..}_mask` [B, T]
    (1 on real tokens), `{..}_last` [B] (index of the closing `<|im_end|>`,
    where the RM reads its score; the last kept token when truncated) and
    `gold_margin` [B] float32 (NaN for JSONL pairs without one).

    Args:
      num_pairs: pairs from `registry.preference_pairs(split, ...)`, or the
        first `num_pairs` records of `path` (`{"prompt", "chosen", "rejected"}`).
    """
    if path is not None:
        pairs = read_jsonl(path, num_pairs)
    else:
        if num_pairs is None:
            raise ValueError("num_pairs is required for the built-in task world")
        pairs = registry.preference_pairs(split, num_pairs, seed=seed, noise=noise)
    pairs = [
        {k: p[k] for k in ("prompt", "chosen", "rejected", "gold_margin") if k in p} for p in pairs
    ]
    items = _sharded(pairs, seed, shard_index, shard_count)
    counter = _Counter("preference_loader", seq_len)
    dataset = items.repeat(num_epochs).map(lambda p: _pair_row(tok, p, seq_len, template, counter))
    dataset = dataset.to_iter_dataset(_READ_OPTIONS).batch(batch_size, drop_remainder=True)
    return Loader(dataset, len(items), counter)


def rl_prompts(
    *,
    batch_size: int,
    seed: int = 0,
    domains: Sequence[str] = base.DOMAINS,
    num_examples: int | None = None,
    difficulty: int | None = None,
    split: str = "rl",
    path: str | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    num_epochs: int | None = None,
    domain_weights: Sequence[float] = (),
) -> Loader:
    """Batches of prompts for RL: each item is `{"epoch": int, "example": Example}`.

    Every epoch visits each prompt once, in a fresh order; `batch_size` is per
    process and a batch may straddle two epochs (each item says which). A
    domain's pool holds `num_examples` × its weight in `domain_weights`
    (default 1 each), so the weights are the domains' shares of every batch.
    """
    if path is not None:
        examples = examples_from_jsonl(path, num_examples)
    else:
        examples = _task_examples(
            domains, split, num_examples, seed, difficulty, weights=domain_weights
        )
    items = _sharded(examples, seed, shard_index, shard_count)
    size = len(items)
    dataset = items.repeat(num_epochs).map_with_index(
        lambda i, ex: {"epoch": i // size, "example": ex}
    )
    dataset = dataset.to_iter_dataset(_READ_OPTIONS).batch(
        batch_size, drop_remainder=True, batch_fn=list
    )
    return Loader(dataset, size)
