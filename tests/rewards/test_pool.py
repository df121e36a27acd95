"""Tests of the verifier pool: ordering, parallel == inline, timeouts, crashes."""

import threading

import pytest

from nemocascade.rewards import pool
from nemocascade.tasks import registry as tasks_registry

LOOP = "def f(x):\n    while True:\n        pass"


def _batch(n_per_domain=6):
    names, prompts, completions, examples = [], [], [], []
    for domain, name in (("math", "math"), ("code", "code"), ("if", "if"), ("chat", "chat_gold")):
        for e in tasks_registry.generate(domain, "eval", n_per_domain, seed=0):
            names.append(name)
            prompts.append(e.prompt)
            completions.append(e.answer)
            examples.append(e)
    return names, prompts, completions, examples


def test_parallel_matches_inline():
    batch = _batch()
    with pool.VerifierPool(num_workers=0) as inline:
        expected = inline.score(*batch)
    with pool.VerifierPool(num_workers=2) as workers:
        got = workers.score(*batch)
    assert [r.score for r in got] == [r.score for r in expected]
    assert all(r.score == 1.0 for r in got[:18])  # math, code and IF references are exact


def test_timeout_scores_zero_and_pool_recovers():
    names, prompts, completions, examples = _batch(2)
    with pool.VerifierPool(num_workers=2, timeout_s=0.5) as workers:
        # 0.5 s is far under the sandbox's own 2 s limit, so the pool's deadline fires.
        (looped,) = workers.score(["code"], [""], [LOOP], [examples[2]])
        assert looped.score == 0.0 and looped.info["error"] == "timeout after 0.5s"
        # A generous deadline for the rest, so a loaded machine cannot fail a real item:
        # the replacement worker scores every reference like a fresh pool.
        workers.timeout_s = 60.0
        results = workers.score(names, prompts, completions, examples)
    assert [r.score for n, r in zip(names, results, strict=True) if n != "chat_gold"] == [1.0] * 6


def test_crashed_worker_scores_zero():
    e = tasks_registry.generate("code", "eval", 1, seed=0)[0]
    with pool.VerifierPool(num_workers=1, timeout_s=30.0) as workers:
        # Kill the worker while it waits on a looping program (sandbox limit 2 s).
        timer = threading.Timer(0.5, lambda: workers._workers[0].process.kill())
        timer.start()
        results = workers.score(["code", "code"], ["", ""], [LOOP, e.answer], [e, e])
        timer.join()
    assert results[0].score == 0.0 and results[0].info["error"] == "verifier worker crashed"
    assert results[1].score == 1.0


def test_bad_arguments():
    with pool.VerifierPool(num_workers=0) as inline:
        with pytest.raises(KeyError, match="unknown verifier"):
            inline.score(["nope"], [""], [""], [None])
        with pytest.raises(ValueError, match="length mismatch"):
            inline.score(["math"], ["", ""], [""], [None])
    with pytest.raises(RuntimeError, match="with"):
        pool.VerifierPool(num_workers=1).score(["math"], [""], [""], [None])
