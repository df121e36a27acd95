"""Tests of row construction: shift, pad, first-fit packing, unpacking."""

import grain
import numpy as np
import pytest

from nemocascade.data import packing


def _features(lengths, seq_len=8):
    out = []
    for n, length in enumerate(lengths):
        tokens = list(range(100 * (n + 1), 100 * (n + 1) + length))
        mask = [0] * (length // 2) + [1] * (length - length // 2)
        out.append(packing.shift(tokens, mask, seq_len)[0])
    return out


def test_shift_and_truncate():
    features, truncated = packing.shift([1, 2, 3, 4], [0, 0, 1, 1], seq_len=8)
    assert not truncated
    assert features["inputs"].tolist() == [1, 2, 3]
    assert features["targets"].tolist() == [2, 3, 4]
    assert features["loss_mask"].tolist() == [0, 1, 1]
    features, truncated = packing.shift(list(range(10)), [1] * 10, seq_len=4)
    assert truncated
    assert features["inputs"].tolist() == [0, 1, 2, 3]
    assert features["targets"].tolist() == [1, 2, 3, 4]
    # Exactly seq_len + 1 tokens fit without truncation.
    assert not packing.shift(list(range(5)), [1] * 5, seq_len=4)[1]
    with pytest.raises(ValueError, match="differ"):
        packing.shift([1, 2], [1], seq_len=4)


def test_pad():
    row = packing.pad(_features([4])[0], seq_len=6)
    assert row["inputs"].tolist() == [100, 101, 102, 0, 0, 0]
    assert row["targets"].tolist() == [101, 102, 103, 0, 0, 0]
    assert row["loss_mask"].tolist() == [0, 1, 1, 0, 0, 0]
    assert row["positions"].tolist() == [0, 1, 2, 0, 0, 0]
    assert row["segment_ids"].tolist() == [1, 1, 1, 0, 0, 0]
    assert all(v.dtype == np.int32 for v in row.values())


def test_packed_equals_unpacked():
    lengths = [3, 7, 2, 9, 5, 4, 9, 2, 6, 3, 8]
    features = _features(lengths)
    dataset = grain.MapDataset.source(features).to_iter_dataset()
    rows = list(packing.pack(dataset, seq_len=8, num_bins=3))
    batch = packing.stack(rows)
    assert batch["inputs"].shape == (len(rows), 8) and batch["inputs"].dtype == np.int32
    assert len(rows) < len(features)
    segments = [seg for row in packing.unpack(batch) for seg in row]
    got = sorted(
        tuple(map(tuple, (s[k].tolist() for k in packing.SEQUENCE_KEYS))) for s in segments
    )
    want = sorted(
        tuple(map(tuple, (f[k].tolist() for k in packing.SEQUENCE_KEYS))) for f in features
    )
    assert got == want
    for b in range(len(rows)):
        ids = batch["segment_ids"][b]
        for s in np.unique(ids[ids > 0]):
            assert batch["positions"][b][ids == s].tolist() == list(range(int((ids == s).sum())))
        assert not batch["loss_mask"][b][ids == 0].any()
    assert packing.fill(batch) == pytest.approx(sum(n - 1 for n in lengths) / batch["inputs"].size)


def test_unpack_of_padded_rows_is_identity():
    features = _features([5, 2])
    batch = packing.stack([packing.pad(f, seq_len=6) for f in features])
    for row, f in zip(packing.unpack(batch), features, strict=True):
        assert len(row) == 1
        for key in packing.SEQUENCE_KEYS:
            np.testing.assert_array_equal(row[0][key], f[key])
