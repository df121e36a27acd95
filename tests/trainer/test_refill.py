"""DAPO-style refill (`rl.dynamic_filter="refill"`): fills the batch, stops at the cap, resumes.

The unit tests build rounds from synthetic rows; the end-to-end test runs the
RL stage at toy size with a reward plug-in that is informative for some
prompts only, and checks the metrics, the train batch and the prompt stream's
saved position against the number of rounds each step sampled.
"""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from nemocascade import config as config_lib, metrics as metrics_lib
from nemocascade.rollout import rows as rows_lib
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer.onpolicy import parts, refill, rl_batch
from nemocascade.trainer.stages import rl
from tests.trainer import test_rl_stage

G = 4  # group size
RL = dataclasses.replace(config_lib.RLConfig(), dynamic_filter="refill", overlong="none")


def _round(index: int, scores: list[list[float]], width: int) -> refill.Round:
    """A round of `len(scores)` groups; row r's tokens are all `index * 100 + r`."""
    n = len(scores) * G
    marks = (index * 100 + np.arange(n, dtype=np.int32))[:, None]
    ones = np.ones((n, width), np.int32)
    rows = rows_lib.PolicyRows(
        inputs=marks * ones,
        targets=marks * ones,
        positions=np.tile(np.arange(width, dtype=np.int32), (n, 1)),
        segment_ids=ones,
        loss_mask=ones,
        sampler_logprobs=-np.ones((n, width), np.float32),
    )
    examples = [
        tasks_base.Example(f"r{index}g{g}", "math", 0, "p", "", "") for g in range(len(scores))
    ]
    flat = np.asarray(scores, np.float32).reshape(-1)
    prepared = rl_batch.prepare(RL, rows, flat, np.zeros(n, bool), G)
    return refill.Round(examples, prepared, {"verify_s": 0.5})


def _drawer(rounds: list[refill.Round]):
    calls = []

    def draw(i: int) -> refill.Round:
        calls.append(i)
        return rounds[i]

    return draw, calls


FLAT, SPREAD = [1, 1, 1, 1], [1, 0, 0, 0]


def test_refill_fills_the_batch_with_informative_groups():
    rounds = [
        _round(0, [FLAT, SPREAD, FLAT], width=6),
        _round(1, [[0] * 4, [0, 1, 1, 0], FLAT], width=9),
        _round(2, [SPREAD, SPREAD, SPREAD], width=6),
        _round(3, [SPREAD, SPREAD, SPREAD], width=6),
    ]
    draw, calls = _drawer(rounds)
    got = refill.collect(rounds[0], draw, max_extra=4)
    assert calls == [1, 2]  # one kept in round 0, one in round 1, enough in round 2
    merged = refill.merge(got, G)
    # Kept groups in sampling order: round 0 group 1, round 1 group 1, round 2 group 0.
    np.testing.assert_array_equal(
        merged.batch["inputs"][:, 0], [4, 5, 6, 7, 104, 105, 106, 107, 200, 201, 202, 203]
    )
    assert merged.batch["inputs"].shape == (12, 9)  # the widest round; the others padded
    assert merged.batch["loss_mask"][:4, 6:].sum() == 0 and merged.batch["segment_ids"][0, 6] == 0
    assert merged.batch["loss_mask"].all(axis=1).sum() == 4  # the width-9 group
    np.testing.assert_allclose(
        merged.batch["advantages"][:4], got[0].prepared.batch["advantages"][4:8]
    )
    np.testing.assert_array_equal(merged.kept_groups, [True] * 3)
    np.testing.assert_array_equal(merged.rewards[4:8], [0, 1, 1, 0])
    m = merged.metrics
    assert (m["refill_rounds"], m["groups_kept"], m["refill_capped"]) == (2, 3, 0)
    assert m["groups_filtered"] == 0 and m["seqs_in_loss"] == 1 and m["verify_s"] == 1.5
    # Rollout metrics cover every sampled row (36), not just the trained ones.
    assert m["groups_zero_std"] == pytest.approx(4 / 9)
    assert m["reward_mean"] == pytest.approx((9 + 6 + 3) / 36)


def test_refill_stops_at_the_cap_and_trains_on_what_it_has():
    rounds = [_round(i, [FLAT, FLAT, [0] * 4], width=5) for i in range(4)]
    rounds[1] = _round(1, [FLAT, SPREAD, FLAT], width=5)
    draw, calls = _drawer(rounds)
    got = refill.collect(rounds[0], draw, max_extra=2)
    assert calls == [1, 2]
    merged = refill.merge(got, G)
    m = merged.metrics
    assert (m["refill_rounds"], m["groups_kept"], m["refill_capped"]) == (2, 1, 1)
    assert m["groups_filtered"] == pytest.approx(2 / 3) and m["seqs_in_loss"] == pytest.approx(
        1 / 3
    )
    # Still a full batch of prompts_per_step groups: the kept one, then dropped ones.
    assert merged.batch["loss_mask"].shape == (12, 5)
    np.testing.assert_array_equal(merged.kept_groups, [True, False, False])
    np.testing.assert_array_equal(merged.batch["inputs"][:4, 0], [104, 105, 106, 107])
    assert merged.batch["loss_mask"][4:].sum() == 0
    # Compaction trains on the kept rows only, as for any filtered batch.
    compact = rl_batch.compact(merged.batch, 4)
    np.testing.assert_array_equal(compact["inputs"][:, 0], [104, 105, 106, 107])


def test_refill_draws_nothing_when_the_first_round_suffices():
    first = _round(0, [SPREAD, SPREAD], width=4)
    draw, calls = _drawer([first])
    got = refill.collect(first, draw, max_extra=3)
    assert calls == [] and len(got) == 1
    merged = refill.merge(got, G)
    np.testing.assert_array_equal(merged.batch["inputs"], first.prepared.batch["inputs"])
    assert merged.metrics["refill_rounds"] == 0 and merged.metrics["refill_capped"] == 0


def test_refill_max_batches_is_validated():
    cd = test_rl_stage.toy_rl_config("stage1_short")
    assert cd.rl.refill_max_batches == 4
    bad = dataclasses.replace(cd.rl, dynamic_filter="refill", refill_max_batches=0)
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.refill_max_batches"):
        config_lib.validate(dataclasses.replace(cd, rl=bad))


def _informative(uid: str) -> bool:
    return hashlib.sha256(uid.encode()).digest()[0] % 2 == 0


def coin_on_half(prompt, completion, example) -> float:
    """A reward plug-in: a coin per completion on half the prompts, 0 on the others."""
    del prompt
    if not _informative(example.uid):
        return 0.0
    return float(hashlib.sha256(completion.encode()).digest()[0] % 2)


def _toy_refill_config(cap: int) -> config_lib.Config:
    cfg = test_rl_stage.toy_rl_config("stage1_short")
    r = dataclasses.replace(
        cfg.rl,
        dynamic_filter="refill",
        refill_max_batches=cap,
        reward_fn="tests.trainer.test_refill:coin_on_half",
        reward="",
        entropy_coef=0.0,
    )
    return dataclasses.replace(cfg, rl=r)


def test_refill_end_to_end_fills_steps_and_resumes_at_the_right_prompt(tmp_path):
    cfg = _toy_refill_config(cap=8)
    rl.run(cfg, str(tmp_path))
    stage = tmp_path / cfg.stage
    rows = [r for r in metrics_lib.read(str(stage / "metrics.jsonl")) if "refill_rounds" in r]
    assert [r["step"] for r in rows] == [1, 2]
    per_step = cfg.rl.prompts_per_step
    for r in rows:
        assert r["groups_kept"] == per_step and r["refill_capped"] == 0
        assert r["groups_filtered"] == 0 and r["seqs_in_loss"] == 1
        assert np.isfinite(r["loss"]) and r["grad_norm"] > 0
    assert sum(r["refill_rounds"] for r in rows) > 0  # half the prompts are uninformative
    rounds = sum(1 + int(r["refill_rounds"]) for r in rows)
    saved = json.loads((stage / "checkpoints" / "2" / "data" / "metadata").read_text())
    # The saved position is after every sampled round: a resumed stream goes on
    # exactly where a stream that drew every round's prompts does.
    fresh = parts.make_stream(cfg, {})
    seen = [ex.uid for _ in range(rounds) for ex in fresh.next_batch()]
    resumed = parts.make_stream(cfg, saved)
    assert [e.uid for e in resumed.next_batch()] == [e.uid for e in fresh.next_batch()]
    # Every sampled group's pass rate reached the stream, trained on or not.
    assert set(saved["last_rate"]) == set(seen)
    assert all(saved["last_rate"][u] == 0 for u in seen if not _informative(u))


@pytest.mark.slow  # two toy RL stages
def test_refill_on_the_continuous_engine_gives_the_static_step(tmp_path):
    """Each round's rows are scored while the rest decode; the step is the static one."""
    steps = {}
    for engine in ("static", "continuous"):
        cfg = _toy_refill_config(cap=8)
        cfg = dataclasses.replace(
            cfg,
            rl=dataclasses.replace(cfg.rl, engine=engine, engine_slots=4),
            train=dataclasses.replace(cfg.train, steps=1),
        )
        rl.run(cfg, str(tmp_path / engine))
        records = metrics_lib.read(str(tmp_path / engine / cfg.stage / "metrics.jsonl"))
        (steps[engine],) = [r for r in records if "refill_rounds" in r]
    static, cont = steps["static"], steps["continuous"]
    assert static["refill_rounds"] > 0
    for key in ("refill_rounds", "groups_kept", "reward_mean", "response_len_mean"):
        assert cont[key] == static[key], key
    assert cont["loss"] == pytest.approx(static["loss"], abs=1e-5)
    assert 0 <= cont["verify_overlap_s"] <= cont["verify_s"] + 1e-6
