"""Tests of the task registry: determinism, split disjointness, budgets."""

import re

import pytest

from nemocascade.tasks import base, registry, splits


@pytest.mark.parametrize("domain", base.DOMAINS)
def test_generate_is_deterministic(domain):
    a = registry.generate(domain, "rl", 50, seed=3)
    b = registry.generate(domain, "rl", 50, seed=3)
    c = registry.generate(domain, "rl", 50, seed=4)
    assert a == b
    assert [e.prompt for e in a] != [e.prompt for e in c]


@pytest.mark.parametrize("domain", base.DOMAINS)
def test_splits_are_disjoint(domain):
    prompts = {}
    for split in base.SPLITS:
        examples = registry.generate(domain, split, 1000, seed=0)
        assert all(splits.split_of(domain, e.prompt) == split for e in examples)
        assert all(e.domain == domain for e in examples)
        prompts[split] = {splits.canonical(e.prompt) for e in examples}
    assert not prompts["sft"] & prompts["rl"]
    assert not prompts["sft"] & prompts["eval"]
    assert not prompts["rl"] & prompts["eval"]


def test_uid_is_a_function_of_the_prompt():
    example = registry.generate("math", "sft", 1, seed=0)[0]
    assert example.uid == splits.uid("math", example.prompt)
    assert example.uid == splits.uid("math", "  " + example.prompt.replace(" ", "  "))


@pytest.mark.parametrize("domain", base.DOMAINS)
def test_default_mix_uses_split_levels(domain):
    for split in base.SPLITS:
        levels = registry.difficulty_levels(domain, split)
        drawn = {e.difficulty for e in registry.generate(domain, split, 200, seed=1)}
        assert drawn == set(levels)


def test_rl_and_eval_share_the_sft_levels():
    # RL's headroom is the SFT teacher's habits, not out-of-range difficulty.
    for domain in base.DOMAINS:
        sft = registry.difficulty_levels(domain, "sft")
        assert registry.difficulty_levels(domain, "rl") == sft
        assert registry.difficulty_levels(domain, "eval") == sft


def test_explicit_difficulty():
    examples = registry.generate("if", "sft", 20, seed=0, difficulty=3)
    assert {e.difficulty for e in examples} == {3}
    with pytest.raises(ValueError, match="difficulty"):
        registry.generate("if", "sft", 1, difficulty=9)


def test_unknown_names_fail_clearly():
    with pytest.raises(KeyError, match="valid: math, code, if, chat"):
        registry.generate("poetry", "sft", 1)
    with pytest.raises(KeyError, match="valid: sft, rl, eval"):
        registry.difficulty_levels("math", "train")


def _approx_tokens(text):
    # Digits and punctuation are one token each, words one token.
    return len(re.findall(r"\d|[A-Za-z]+|[^\sA-Za-z\d]", text))


@pytest.mark.parametrize("domain", base.DOMAINS)
def test_sft_examples_fit_the_token_budget(domain):
    template_overhead = 12  # role markers, mode flag, think tags, end of turn
    for e in registry.generate(domain, "sft", 1000, seed=0):
        total = sum(_approx_tokens(t) for t in (e.prompt, e.thinking, e.answer))
        assert total + template_overhead <= 220, e


def test_preference_pairs():
    pairs = registry.preference_pairs("sft", 400, seed=0, noise=0.1)
    assert len(pairs) == 400
    assert pairs == registry.preference_pairs("sft", 400, seed=0, noise=0.1)
    flipped = sum(p["gold_margin"] < 0 for p in pairs)
    assert 15 <= flipped <= 70  # ~10% label noise
    assert all(abs(p["gold_margin"]) >= 0.05 for p in pairs)
    assert any(p["chosen"].startswith("<think>\n") for p in pairs)
    assert any("<think>" not in p["chosen"] for p in pairs)
    clean = registry.preference_pairs("rl", 100, seed=0, noise=0.0)
    assert all(p["gold_margin"] > 0 for p in clean)
    assert all(p["example"].domain == "chat" for p in clean)
