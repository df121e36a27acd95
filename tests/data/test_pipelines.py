"""Tests of the grain pipelines: contents, packing, resume, sharding, epochs."""

import collections
import itertools
import json

import numpy as np
import pytest

from nemocascade.data import packing, pipelines, tokenizer as tokenizer_lib

SEQ_LEN = 256


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


# The pipeline mechanics below are counted on these four short-example domains.
DOMAINS = ("math", "code", "if", "chat")


def _sft(tok, **kwargs):
    defaults = dict(
        seq_len=SEQ_LEN, batch_size=4, num_examples=3, seed=7, pack=False, domains=DOMAINS
    )
    return pipelines.sft_loader(tok, **{**defaults, **kwargs})


def _segments(batches):
    """All (inputs, targets, loss_mask) segments of some batches, in order."""
    out = []
    for batch in batches:
        for row in packing.unpack(batch):
            out += [tuple(tuple(s[k].tolist()) for k in packing.SEQUENCE_KEYS) for s in row]
    return out


def _equal(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_sft_batch_contents(tok):
    loader = _sft(tok)
    assert loader.epoch_size == 3 * 4 * 2  # examples per domain x domains x modes
    batch = next(loader)
    assert sorted(batch) == sorted(packing.ROW_KEYS)
    for value in batch.values():
        assert value.shape == (4, SEQ_LEN) and value.dtype == np.int32
    for b in range(4):
        n = int(batch["segment_ids"][b].sum())
        inputs, targets, mask = (batch[k][b][:n] for k in ("inputs", "targets", "loss_mask"))
        np.testing.assert_array_equal(targets[:-1], inputs[1:])
        assert batch["positions"][b][:n].tolist() == list(range(n))
        assert tok.piece(inputs[0]) == "<|im_start|>"
        assert tok.decode(inputs).count("<|im_start|>assistant\n") == 1
        target_text = tok.decode(targets[mask == 1])
        assert target_text.endswith("<|im_end|>") and targets[-1] == tok.eos_id
        # The mask covers exactly what follows the assistant header.
        full = tok.decode(np.concatenate([inputs[:1], targets]))
        assert full.split("<|im_start|>assistant\n", 1)[1] == target_text
        assert not batch["loss_mask"][b][n:].any() and not batch["inputs"][b][n:].any()


def test_both_modes_of_every_example(tok):
    segments = _segments(itertools.islice(_sft(tok, num_epochs=1), 6))
    texts = [tok.decode(s[0]) for s in segments]
    assert len(texts) == 24
    assert sum(" /think<|im_end|>" in t for t in texts) == 12
    assert sum(" /no_think<|im_end|>" in t for t in texts) == 12


def test_packed_equals_unpacked(tok):
    unpacked = _segments(_sft(tok, num_epochs=1, batch_size=1))
    packed_batches = list(_sft(tok, num_epochs=1, batch_size=1, pack=True))
    assert len(packed_batches) < len(unpacked) / 2
    assert collections.Counter(_segments(packed_batches)) == collections.Counter(unpacked)
    # Wider batches pack as well; only the last incomplete batch is dropped.
    wide = _segments(_sft(tok, num_epochs=1, batch_size=4, pack=True))
    assert not collections.Counter(wide) - collections.Counter(unpacked)
    assert len(wide) > len(unpacked) * 0.7


@pytest.mark.parametrize("pack", [False, True])
def test_resume_gives_identical_batches(tok, pack):
    loader = _sft(tok, pack=pack)
    for _ in range(5):  # an epoch is 6 unpacked batches: resume crosses it
        next(loader)
    state = json.dumps(loader.get_state())
    expected = [next(loader) for _ in range(4)]
    resumed = _sft(tok, pack=pack)
    resumed.set_state(json.loads(state))
    for want in expected:
        assert _equal(next(resumed), want)


def test_shards_are_disjoint_and_covering(tok):
    full = _segments(_sft(tok, num_epochs=1, batch_size=1))
    shards = [
        _segments(_sft(tok, num_epochs=1, batch_size=1, shard_index=i, shard_count=3))
        for i in range(3)
    ]
    assert [len(s) for s in shards] == [8, 8, 8]
    assert sum(map(collections.Counter, shards), collections.Counter()) == collections.Counter(full)
    with pytest.raises(ValueError, match="shard_index"):
        _sft(tok, shard_index=3, shard_count=3)


def test_epochs_are_reshuffled(tok):
    segments = _segments(_sft(tok, num_epochs=2, batch_size=1))
    first, second = segments[:24], segments[24:]
    assert len(second) == 24
    assert first != second
    assert collections.Counter(first) == collections.Counter(second)


def test_truncation_is_counted(tok):
    loader = _sft(tok, seq_len=40, num_epochs=1, batch_size=1)
    segments = _segments(loader)
    assert len(segments) == 24
    assert 0 < loader.num_truncated <= 24
    assert sum(len(s[0]) == 40 for s in segments) >= loader.num_truncated


def test_jsonl_source(tok, tmp_path):
    path = tmp_path / "sft.jsonl"
    records = [
        {"prompt": "Add 1 and 2.", "thinking": "1+2=3", "answer": "3", "domain": "math"},
        {"prompt": "Say hi.", "answer": "hi", "domain": "chat"},
        {"prompt": "Echo x.", "thinking": "", "answer": "x", "domain": "chat"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    loader = pipelines.sft_loader(
        tok, files=[str(path)], seq_len=64, batch_size=1, num_epochs=1, pack=False
    )
    # One conversation per record, in the mode its answer has (a trace = thinking).
    assert loader.epoch_size == 3
    texts = sorted(tok.decode(s[0]) + tok.decode(s[1][-1:]) for s in _segments(loader))
    assert texts[0].startswith("<|im_start|>user\nAdd 1 and 2. /think")
    assert texts[0].endswith("<think>\n1+2=3\n</think>\n\n3<|im_end|>")
    assert sum("/no_think<|im_end|>" in t for t in texts) == 2


def test_eval_batches(tok):
    kwargs = dict(seq_len=SEQ_LEN, batch_size=5, num_examples=3, domains=("math", "code"))
    batches = pipelines.eval_batches(tok, **kwargs)
    again = pipelines.eval_batches(tok, **kwargs)
    assert len(batches) == 3  # 12 sequences in batches of 5, the last padded
    assert all(_equal(a, b) for a, b in zip(batches, again, strict=True))
    rows_used = [int((b["segment_ids"].sum(1) > 0).sum()) for b in batches]
    assert rows_used == [5, 5, 2]
    assert not batches[-1]["loss_mask"][2:].any()
    train = set(_segments(_sft(tok, num_epochs=1, domains=("math", "code"))))
    assert not train & set(_segments(batches))


def test_preference_loader(tok):
    loader = pipelines.preference_loader(tok, seq_len=SEQ_LEN, batch_size=4, num_pairs=8)
    batch = next(loader)
    for side in ("chosen", "rejected"):
        tokens, mask, last = (batch[f"{side}_{k}"] for k in ("tokens", "mask", "last"))
        assert tokens.shape == mask.shape == (4, SEQ_LEN) and last.shape == (4,)
        assert tokens[np.arange(4), last].tolist() == [tok.eos_id] * 4
        assert mask.sum(1).tolist() == (last + 1).tolist()
        assert not (tokens == tok.token_id("<think>")).any()
        assert not tokens[mask == 0].any()
    assert np.isfinite(batch["gold_margin"]).all()
    assert not np.array_equal(batch["chosen_tokens"], batch["rejected_tokens"])
    state = loader.get_state()
    want = next(loader)
    resumed = pipelines.preference_loader(tok, seq_len=SEQ_LEN, batch_size=4, num_pairs=8)
    resumed.set_state(state)
    assert _equal(next(resumed), want)


def test_preference_loader_from_jsonl(tok, tmp_path):
    path = tmp_path / "pairs.jsonl"
    pair = {"prompt": "Hi?", "chosen": "<think>\nt\n</think>\n\nHello!", "rejected": "Go."}
    path.write_text(json.dumps(pair) + "\n")
    batch = next(pipelines.preference_loader(tok, files=[str(path)], seq_len=32, batch_size=1))
    chosen = tok.decode(batch["chosen_tokens"][0][: batch["chosen_last"][0] + 1])
    assert chosen.endswith("<|im_start|>assistant\nHello!<|im_end|>")
    assert np.isnan(batch["gold_margin"][0])


def test_rl_prompts_epochs_resume_and_shards():
    def loader(**kwargs):
        return pipelines.rl_prompts(batch_size=3, num_examples=3, domains=("math", "if"), **kwargs)

    items = list(itertools.chain.from_iterable(loader(num_epochs=2)))
    assert len(items) == 12 and loader().epoch_size == 6
    epochs = [[i["example"].uid for i in items if i["epoch"] == e] for e in (0, 1)]
    assert sorted(epochs[0]) == sorted(epochs[1]) and len(set(epochs[0])) == 6
    assert epochs[0] != epochs[1]
    assert all(i["example"].meta for i in items)

    run = loader()
    next(run)
    state = run.get_state()
    want = [[i["example"].uid for i in next(run)] for _ in range(3)]
    resumed = loader()
    resumed.set_state(state)
    assert [[i["example"].uid for i in next(resumed)] for _ in range(3)] == want

    shards = [
        {i["example"].uid for b in loader(num_epochs=1, shard_index=s, shard_count=2) for i in b}
        for s in range(2)
    ]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == set(epochs[0])


def test_rl_prompts_domain_weights_set_each_domains_share():
    loader = pipelines.rl_prompts(
        batch_size=4, num_examples=4, domains=("math", "if"), domain_weights=(3.0, 1.0)
    )
    assert loader.epoch_size == 16
    epoch = [i["example"].domain for b in itertools.islice(loader, 4) for i in b]
    assert epoch.count("math") == 12 and epoch.count("if") == 4
