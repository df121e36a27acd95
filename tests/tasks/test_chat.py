"""Tests of the chat generator and its hidden gold rubric."""

import statistics

import pytest

from nemocascade.tasks import base, chat, registry

RIVERS = base.Example(
    "u",
    "chat",
    1,
    "Tell me about rivers.",
    "",
    "",
    {"keywords": ["river", "water", "sea", "fish", "bank", "flow"]},
)


def test_gold_rubric_orders_responses():
    facts = "A river carries fresh water to the sea. Many towns grow near a river bank."
    good = facts + " Hope this helps."
    no_close = facts
    off_topic = "Each hive has one queen. Bees make honey from flower nectar. Hope this helps."
    repeated = "A river carries fresh water to the sea. " * 4 + "Hope this helps."
    scores = [chat.gold_score(RIVERS, t) for t in (good, no_close, off_topic, repeated)]
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] == pytest.approx(0.8)  # no closing
    assert scores[2] == pytest.approx(0.4 + 0.2 * 14 / 15)  # off topic, 14 words
    assert scores[3] == pytest.approx(0.4 / 4 + 0.2 + 0.2 * 0.5 / 4 + 0.2)  # 1 of 4 distinct
    assert chat.gold_score(RIVERS, "") == 0.0
    assert chat.gold_score(RIVERS, "Hope this helps.") < 0.3


def test_sft_responses_have_mixed_quality():
    examples = registry.generate("chat", "sft", 1000, seed=0)
    scores = sorted(chat.gold_score(e, e.answer) for e in examples)
    assert scores[0] <= 0.35 and scores[-1] == pytest.approx(1.0)
    assert scores[len(scores) // 10] < 0.6 < statistics.median(scores)


def test_rl_references_are_clean():
    scores = [chat.gold_score(e, e.answer) for e in registry.generate("chat", "rl", 300, seed=0)]
    assert min(scores) >= 0.8
    assert statistics.mean(scores) > 0.95
