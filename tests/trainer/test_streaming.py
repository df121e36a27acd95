"""Streaming verification: the same scores as one batch call, and the overlap is measured."""

import time

import numpy as np
import pytest

from nemocascade.rewards import pool as pool_lib
from nemocascade.tasks import registry
from nemocascade.trainer.onpolicy import streaming


@pytest.fixture(scope="module")
def rows():
    examples = registry.generate("math", "eval", 6)
    # Right answers for even rows, a wrong one for odd rows.
    completions = [
        ex.answer if i % 2 == 0 else "The answer is \\boxed{-12345}"
        for i, ex in enumerate(examples)
    ]
    return examples, completions


def test_streamed_scores_equal_batch_scores(rows):
    examples, completions = rows
    with pool_lib.VerifierPool(num_workers=2, timeout_s=30.0) as pool:

        def score_rows(idx, texts):
            exs = [examples[i] for i in idx]
            return [
                r.score
                for r in pool.score(["math"] * len(idx), [e.prompt for e in exs], list(texts), exs)
            ]

        batch = np.asarray(score_rows(np.arange(len(examples)), completions), np.float32)
        scorer = streaming.StreamingScorer(score_rows, len(examples))
        for piece in ([4, 1], [0], [5, 2, 3]):  # out of order, as rows finish
            scorer.submit(np.asarray(piece), [completions[i] for i in piece])
        scores, metrics = scorer.finish(time.perf_counter())
    np.testing.assert_array_equal(scores, batch)
    assert batch[::2].tolist() == [1.0] * 3 and batch[1::2].tolist() == [0.0] * 3
    assert metrics["verify_s"] > 0


def test_overlap_counts_the_verification_done_before_the_rollout_ended():
    def slow(idx, texts):
        time.sleep(0.2)
        return [float(i) for i in idx]

    scorer = streaming.StreamingScorer(slow, 3)
    scorer.submit(np.asarray([0, 1]), ["a", "b"])
    time.sleep(0.3)  # "decoding" goes on while the first job runs
    end = time.perf_counter()
    scorer.submit(np.asarray([2]), ["c"])  # the last rows finish with the rollout
    scores, m = scorer.finish(end)
    assert scores.tolist() == [0.0, 1.0, 2.0]
    assert m["verify_s"] == pytest.approx(0.4, abs=0.1)
    assert m["verify_overlap_s"] == pytest.approx(0.2, abs=0.05)
    assert m["verify_wait_s"] == pytest.approx(0.2, abs=0.1)


def test_rows_must_be_submitted_exactly_once():
    scorer = streaming.StreamingScorer(lambda idx, texts: [0.0] * len(idx), 2)
    scorer.submit(np.asarray([0]), ["a"])
    with pytest.raises(ValueError, match="twice"):
        scorer.submit(np.asarray([0]), ["a"])
    with pytest.raises(ValueError, match="never submitted"):
        scorer.finish(time.perf_counter())
