"""Training rows from token sequences: shift, truncate, pad or pack.

A row (and a batch, with a leading B axis) is a dict of int32 arrays [T]:

  inputs       token ids fed to the model
  targets      the next token of each input (inputs shifted by one, per segment)
  loss_mask    1 where the target is an assistant token
  positions    0, 1, ... restarting at every packed segment (0 on padding)
  segment_ids  1, 2, ... one per packed sequence, 0 on padding

A sequence of L tokens yields L - 1 (input, target) pairs, so it fits a row of
length T when L <= T + 1. Packing is grain's first-fit packer: sequences are
added to the first of `num_bins` open rows with room; when one fits nowhere all
rows are emitted. Its position is checkpointable like any grain iterator.
"""

from __future__ import annotations

from collections.abc import Sequence

import grain
import numpy as np

SEQUENCE_KEYS = ("inputs", "targets", "loss_mask")
ROW_KEYS = SEQUENCE_KEYS + ("positions", "segment_ids")


def shift(tokens: Sequence[int], loss_mask: Sequence[int], seq_len: int) -> tuple[dict, bool]:
    """Next-token features of one sequence, truncated to `seq_len` pairs.

    Returns the features and whether the sequence was truncated.
    """
    if len(tokens) != len(loss_mask):
        raise ValueError(f"tokens ({len(tokens)}) and loss_mask ({len(loss_mask)}) differ")
    if len(tokens) < 2:
        raise ValueError("a training sequence needs at least two tokens")
    tokens = np.asarray(tokens, np.int32)
    loss_mask = np.asarray(loss_mask, np.int32)
    truncated = len(tokens) > seq_len + 1
    tokens, loss_mask = tokens[: seq_len + 1], loss_mask[: seq_len + 1]
    features = {"inputs": tokens[:-1], "targets": tokens[1:], "loss_mask": loss_mask[1:]}
    return features, truncated


def pad(features: dict, seq_len: int) -> dict:
    """One sequence alone in a row of length `seq_len`."""
    n = len(features["inputs"])
    if n > seq_len:
        raise ValueError(f"sequence of {n} pairs does not fit seq_len={seq_len}")
    row = {}
    for key in SEQUENCE_KEYS:
        row[key] = np.zeros(seq_len, np.int32)
        row[key][:n] = features[key]
    row["positions"] = np.zeros(seq_len, np.int32)
    row["positions"][:n] = np.arange(n, dtype=np.int32)
    row["segment_ids"] = np.zeros(seq_len, np.int32)
    row["segment_ids"][:n] = 1
    return row


def _from_grain(packed: dict) -> dict:
    row = {key: packed[key].astype(np.int32) for key in SEQUENCE_KEYS}
    row["positions"] = packed["inputs_positions"].astype(np.int32)
    row["segment_ids"] = packed["inputs_segment_ids"].astype(np.int32)
    return row


def pack(dataset: grain.IterDataset, seq_len: int, num_bins: int) -> grain.IterDataset:
    """First-fit packs a dataset of `shift` features into rows of `seq_len`."""
    packed = grain.experimental.FirstFitPackIterDataset(
        dataset,
        length_struct={key: seq_len for key in SEQUENCE_KEYS},
        num_packing_bins=num_bins,
        # Rows keep arrival order, so a resumed run and a single process agree.
        shuffle_bins=False,
    )
    return packed.map(_from_grain)


def stack(rows: Sequence[dict]) -> dict:
    """Rows -> a batch of [B, T] arrays."""
    return {key: np.stack([row[key] for row in rows]) for key in rows[0]}


def unpack(batch: dict) -> list[list[dict]]:
    """Inverse of packing: per row, the list of its segments' `shift` features."""
    rows = []
    for b in range(batch["segment_ids"].shape[0]):
        segment_ids = batch["segment_ids"][b]
        segments = []
        for s in np.unique(segment_ids[segment_ids > 0]):
            where = segment_ids == s
            segments.append({key: batch[key][b][where] for key in SEQUENCE_KEYS})
        rows.append(segments)
    return rows


def fill(batch: dict) -> float:
    """Fraction of non-padding positions in a batch."""
    return float(np.mean(batch["segment_ids"] > 0))
