"""Entry points of the built-in task world: examples and preference pairs.

`generate` draws examples of one domain and split by rejection: a candidate
is kept only if the hash split assigns its prompt to the requested split, so
splits are disjoint by construction. Everything is deterministic in
(domain, split, n, seed, difficulty).
"""

from __future__ import annotations

import random

from nemocascade.tasks import base, chat, code, instruction, math, splits, swe

_MODULES = {"math": math, "code": code, "if": instruction, "chat": chat, "swe": swe}
_MAX_DRAWS = 2000
_MAX_DUPLICATES = 20


def _module(domain: str):
    if domain not in _MODULES:
        raise KeyError(f"unknown domain {domain!r}; valid: {', '.join(base.DOMAINS)}")
    return _MODULES[domain]


def difficulty_levels(domain: str, split: str) -> tuple[int, ...]:
    """The difficulty levels a split draws from by default."""
    if split not in base.SPLITS:
        raise KeyError(f"unknown split {split!r}; valid: {', '.join(base.SPLITS)}")
    return tuple(_module(domain).SPLIT_LEVELS[split])


def all_levels(domain: str) -> tuple[int, ...]:
    return tuple(sorted({lv for s in base.SPLITS for lv in difficulty_levels(domain, s)}))


def _draw(module, rng: random.Random, domain: str, split: str, level: int, seen: set[str]):
    """Redraws until the prompt is in `split` and unseen.

    A small prompt space (chat, IF level 1) may run out of unseen prompts;
    then an in-split duplicate is kept rather than skewing the level mix.
    """
    candidate, duplicates = None, 0
    for _ in range(_MAX_DRAWS):
        drawn = module.sample(rng, level, split)
        if splits.split_of(domain, drawn[0]) != split:
            continue
        candidate = drawn
        if splits.canonical(drawn[0]) not in seen:
            break
        duplicates += 1
        if duplicates >= _MAX_DUPLICATES:
            break
    if candidate is None:
        raise RuntimeError(f"no {split} prompt of {domain} level {level} in {_MAX_DRAWS} draws")
    return candidate


def generate(
    domain: str, split: str, n: int, seed: int = 0, difficulty: int | None = None
) -> list[base.Example]:
    """`n` examples of `domain` whose prompts hash into `split`.

    difficulty None draws each example's level uniformly from the split's
    default levels; an explicit level may lie outside them (e.g. probing SFT
    prompts at RL difficulty).
    """
    levels = difficulty_levels(domain, split)
    if difficulty is not None:
        if difficulty not in all_levels(domain):
            raise ValueError(f"{domain} difficulty {difficulty} not in {all_levels(domain)}")
        levels = (difficulty,)
    module = _module(domain)
    rng = random.Random(f"{domain}/{split}/{seed}/{difficulty}")
    examples: list[base.Example] = []
    seen: set[str] = set()
    for _ in range(n):
        level = rng.choice(levels)
        prompt, thinking, answer, meta = _draw(module, rng, domain, split, level, seen)
        seen.add(splits.canonical(prompt))
        examples.append(
            base.Example(
                uid=splits.uid(domain, prompt),
                domain=domain,
                difficulty=level,
                prompt=prompt,
                thinking=thinking,
                answer=answer,
                meta=meta,
            )
        )
    return examples


def completion_text(thinking: str | None, answer: str) -> str:
    """Assistant completion text as verifiers see it (no end-of-turn token)."""
    if thinking is None:
        return answer
    return f"<think>\n{thinking}\n</think>\n\n{answer}"


def preference_pairs(split: str, n: int, seed: int = 0, noise: float = 0.1) -> list[dict]:
    """Chat preference pairs labelled by the gold rubric, flipped with prob `noise`.

    Both responses of a pair answer the same prompt in the same mode (half of
    the pairs carry a think block). `gold_margin` = gold(chosen) - gold(rejected),
    negative for a flipped label; near-ties (< 0.05) are skipped.
    """
    rng = random.Random(f"pairs/{split}/{seed}/{noise}")
    prompts = generate("chat", split, n, seed=seed)
    pairs = []
    i = 0
    while len(pairs) < n:
        example = prompts[i % len(prompts)]
        i += 1
        a, b = (chat.respond(rng, example.meta["topic"], rng.uniform(0.1, 0.6)) for _ in range(2))
        score_a, score_b = chat.gold_score(example, a), chat.gold_score(example, b)
        if abs(score_a - score_b) < 0.05:
            continue
        chosen, rejected = (a, b) if score_a > score_b else (b, a)
        margin = abs(score_a - score_b)
        if rng.random() < noise:
            chosen, rejected, margin = rejected, chosen, -margin
        thinking = example.thinking if rng.random() < 0.5 else None
        pairs.append(
            {
                "prompt": example.prompt,
                "chosen": completion_text(thinking, chosen),
                "rejected": completion_text(thinking, rejected),
                "example": example,
                "gold_margin": margin,
            }
        )
    return pairs
