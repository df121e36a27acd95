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

from nemocascade.data import chat_template, packing, records, tokenizer as tokenizer_lib
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


class Files:
    """Checked, indexed record files mixed by weight: a grain random-access source.

    Item i is the parsed record (`records.parse(kind, ...)`). A file of weight
    w contributes each record ⌊w⌋ times plus a seeded ⌊(w − ⌊w⌋)·n⌋ of them
    once more per epoch.
    """

    def __init__(self, paths, kind, weights=(), seed=0, keep=None, limit=None):
        weights = tuple(weights) or (1.0,) * len(paths)
        self.kind = kind
        self.sources = [records.index(p, kind, limit=limit, keep=keep) for p in paths]
        rng = np.random.default_rng(seed)
        parts, start = [], 0
        for source, w in zip(self.sources, weights, strict=True):
            n = len(source)
            ids = np.arange(start, start + n)
            extra = rng.permutation(n)[: int((w - int(w)) * n)] + start
            parts += [ids] * int(w) + [np.sort(extra)]
            start += n
        self._items = np.concatenate(parts).astype(np.int64)
        self._starts = np.cumsum([0] + [len(s) for s in self.sources])

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        g = int(self._items[i])
        f = int(np.searchsorted(self._starts, g, side="right")) - 1
        return records.load(self.sources[f], g - int(self._starts[f]), self.kind)


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


def _sft_dataset(tok, items, seq_len, template, counter, turns="all") -> grain.MapDataset:
    """Rendered `shift` features, unbatched, of (example, mode) items or conversations."""

    def render(item):
        if isinstance(item, tuple):
            tokens, mask = chat_template.render_sft(tok, item[0], item[1], template)
        else:
            tokens, mask = chat_template.render_messages(tok, item, template, turns)
        features, truncated = packing.shift(tokens, mask, seq_len)
        counter.add(truncated)
        return features

    return items.map(render)


def _rows(dataset: grain.MapDataset, seq_len: int, batch_size: int, pack: bool):
    dataset = dataset.to_iter_dataset(_READ_OPTIONS)
    if pack:
        return packing.pack(dataset, seq_len, num_bins=batch_size)
    return dataset.map(lambda features: packing.pad(features, seq_len))


def _sft_source(files, weights, modes, examples_fn, seed):
    """Conversations of record files, else the task world's (example, mode) items."""
    if files:
        return Files(files, "sft", weights, seed)
    return _sft_items(examples_fn(), modes)


def sft_loader(
    tok: tokenizer_lib.Tokenizer,
    *,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
    domains: Sequence[str] = base.DOMAINS,
    modes: Sequence[str] = base.MODES,
    num_examples: int | None = None,
    files: Sequence[str] = (),
    file_weights: Sequence[float] = (),
    loss_turns: str = "all",
    pack: bool = True,
    template: chat_template.AnyTemplate = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
    num_epochs: int | None = None,
    domain_weights: Sequence[float] = (),
) -> Loader:
    """SFT batches (see `packing`): conversations of `files`, or the task world in every mode.

    Args:
      seq_len: T, the row length (a sequence of T + 1 tokens fits one row).
      batch_size: rows per batch on this process.
      seed: draws the task-world examples and shuffles each epoch.
      pack: first-fit pack several sequences per row (else one per row).
      num_examples: examples per domain from the task world's SFT split.
      files: SFT record files (`records`, docs/data.md) instead of the task
        world, mixed by `file_weights`; the loss covers `loss_turns`.
      num_epochs: passes over the data; None repeats forever.
      domain_weights: per-domain multipliers of `num_examples` (the SFT mix).
    """

    def task_world():
        return _task_examples(domains, "sft", num_examples, seed, weights=domain_weights)

    items = _sharded(
        _sft_source(files, file_weights, modes, task_world, seed), seed, shard_index, shard_count
    )
    counter = _Counter("sft_loader", seq_len)
    dataset = _sft_dataset(tok, items.repeat(num_epochs), seq_len, template, counter, loss_turns)
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
    files: Sequence[str] = (),
    loss_turns: str = "all",
    seed: int = 0,
    template: chat_template.AnyTemplate = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
) -> list[dict]:
    """Fixed held-out batches (task world's eval split, or `files`), one pass, unpacked.

    At most `num_examples` records of the files (per domain for the task
    world). The last batch is completed with all-padding rows (loss_mask 0),
    so every sequence counts exactly once and every batch has the same shape.
    """
    if files:
        source = Files(files, "sft", limit=num_examples)
        items = [source[i] for i in range(min(len(source), num_examples or len(source)))]
    else:
        items = _sft_items(_task_examples(domains, "eval", num_examples, seed), modes)
    items = _sharded(items, None, shard_index, shard_count)
    counter = _Counter("eval_batches", seq_len)
    dataset = _sft_dataset(tok, items, seq_len, template, counter, loss_turns)
    rows = [packing.pad(f, seq_len) for f in dataset]
    empty = {key: np.zeros(seq_len, np.int32) for key in packing.ROW_KEYS}
    rows += [empty] * (-len(rows) % batch_size)
    return [packing.stack(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]


def _pair_row(tok, pair, seq_len, template, counter) -> dict:
    row = {"gold_margin": np.float32(pair.get("gold_margin", np.nan))}
    prompt = pair.get("messages") or pair["prompt"]
    for side in ("chosen", "rejected"):
        answer = chat_template.rm_answer(pair[side])
        ids = chat_template.render_rm_input(tok, prompt, answer, template)
        counter.add(len(ids) > seq_len)
        ids = chat_template.keep_last(ids, seq_len)
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
    files: Sequence[str] = (),
    file_weights: Sequence[float] = (),
    template: chat_template.AnyTemplate = chat_template.DEFAULT,
    shard_index: int = 0,
    shard_count: int = 1,
    num_epochs: int | None = None,
) -> Loader:
    """Reward-model pairs as `chat_template.rm_input_ids` sequences.

    Batch keys: `{chosen,rejected}_tokens` [B, T] (0-padded), `{..}_mask` [B, T]
    (1 on real tokens), `{..}_last` [B] (index of the closing end-of-turn
    token, where the RM reads its score, kept when truncated) and
    `gold_margin` [B] float32 (NaN for file pairs without one).

    Args:
      num_pairs: pairs from `registry.preference_pairs(split, ...)`, or at
        most `num_pairs` records of each of `files` (all when None).
      files: preference record files (docs/data.md) instead of the task world.
    """
    if files:
        pairs = Files(files, "preference", file_weights, seed, limit=num_pairs or None)
    else:
        if num_pairs is None:
            raise ValueError("num_pairs is required for the built-in task world")
        pairs = registry.preference_pairs(split, num_pairs, seed=seed, noise=noise)
        pairs = [
            {k: p[k] for k in ("prompt", "chosen", "rejected", "gold_margin") if k in p}
            for p in pairs
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
    files: Sequence[str] = (),
    file_weights: Sequence[float] = (),
    keep=None,
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
    `files` (RL records, docs/data.md) replace the task world, mixed by
    `file_weights`; `keep(example) -> bool` drops prompts when indexing.
    """
    if files:
        examples = Files(files, "rl", file_weights, seed, keep=keep)
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
