"""Chat domain: open requests judged by a hidden gold rubric.

Requests ("Tell me about rivers.") come from small topic banks. Responses are
assembled from short on-topic sentences, with optional defects (off-topic
sentences, repetition, bad length, missing polite closing), so SFT data has a
spread of quality. `gold_score` is the hidden rubric: it labels preference
pairs for the reward model and judges RLHF and evaluation, and is never a
training reward itself.
"""

from __future__ import annotations

import random
import re

from nemocascade.tasks import base

SPLIT_LEVELS = {"sft": (1,), "rl": (1,), "eval": (1,)}

# topic -> (on-topic keywords, fact sentences that each use a keyword)
TOPICS = {
    "rivers": (
        "river water sea fish bank flow",
        (
            "A river carries fresh water to the sea.",
            "Many towns grow near a river bank.",
            "Fish swim against the flow to lay eggs.",
            "Rivers shape valleys over long years.",
        ),
    ),
    "sleep": (
        "sleep bed rest night dream tired",
        (
            "Adults need about eight hours of sleep.",
            "Go to bed at the same time each night.",
            "Screens before bed make rest harder.",
            "A cool dark room helps you sleep.",
        ),
    ),
    "tea": (
        "tea leaf cup water brew green",
        (
            "Tea is made from dried leaf and hot water.",
            "Green tea needs cooler water than black tea.",
            "Brew a cup for three to five minutes.",
            "Many people drink tea every morning.",
        ),
    ),
    "bikes": (
        "bike ride wheel road helmet chain",
        (
            "A bike is a cheap way to get around.",
            "Always wear a helmet when you ride.",
            "Keep the chain clean and oiled.",
            "Check the wheel and brakes before a long ride.",
        ),
    ),
    "gardens": (
        "garden plant soil seed water sun",
        (
            "A garden needs sun and good soil.",
            "Water each plant early in the day.",
            "Start with easy seed like beans.",
            "Pull weeds so the garden can grow.",
        ),
    ),
    "bees": (
        "bee hive honey flower queen pollen",
        (
            "A bee carries pollen from flower to flower.",
            "Each hive has one queen.",
            "Bees make honey from flower nectar.",
            "Without bees many crops would fail.",
        ),
    ),
    "rain": (
        "rain cloud water storm drop wet",
        (
            "Rain falls when a cloud gets heavy with water.",
            "A storm can bring rain and strong wind.",
            "Rain helps fields and forests grow.",
            "Carry a coat when the sky looks wet.",
        ),
    ),
    "maps": (
        "map road north scale city route",
        (
            "A map shows roads and places from above.",
            "North is usually at the top of a map.",
            "The scale tells you real distance.",
            "Plan your route on the map first.",
        ),
    ),
    "bread": (
        "bread flour yeast dough oven bake",
        (
            "Bread needs flour, water, yeast and salt.",
            "Let the dough rise for an hour.",
            "Bake it in a hot oven until golden.",
            "Fresh bread tastes best on the first day.",
        ),
    ),
    "chess": (
        "chess king board piece move game",
        (
            "Chess is played on a board of sixty four squares.",
            "Each piece moves in its own way.",
            "The game ends when the king is trapped.",
            "Practice a few openings to improve at chess.",
        ),
    ),
    "cats": (
        "cat pet fur sleep play mouse",
        (
            "A cat sleeps for much of the day.",
            "Cats like to play with small toys.",
            "Brush the fur of a long haired cat.",
            "Give your pet fresh water every day.",
        ),
    ),
    "the moon": (
        "moon earth night light phase tide",
        (
            "The moon moves around the earth each month.",
            "Its light is sunlight bounced back to us.",
            "Each phase shows a different part of the moon.",
            "The moon pulls on the sea and makes the tide.",
        ),
    ),
    "volcanoes": (
        "volcano lava rock ash fire mountain",
        (
            "A volcano is an opening in the earth.",
            "Hot lava flows out and cools into rock.",
            "Ash from a volcano can travel far.",
            "Some volcano mountains sleep for years.",
        ),
    ),
    "saving money": (
        "money save bank budget spend plan",
        (
            "Make a budget for each month.",
            "Save a small part of your money first.",
            "Spend less on things you do not need.",
            "A bank account keeps savings safe.",
        ),
    ),
    "exercise": (
        "exercise walk body heart muscle move",
        (
            "Exercise keeps the heart strong.",
            "A daily walk is a good start.",
            "Stretch each muscle before you move fast.",
            "Your body needs rest after exercise.",
        ),
    ),
    "reading": (
        "read book page story word library",
        (
            "Read a few pages every day.",
            "A library lends each book for free.",
            "A good story can teach new words.",
            "Reading before bed can help you relax.",
        ),
    ),
    "birds": (
        "bird nest wing egg feather song",
        (
            "A bird builds a nest for its eggs.",
            "Feather and wing help a bird fly.",
            "Many birds sing a song at dawn.",
            "Some birds fly south for the winter.",
        ),
    ),
    "coffee": (
        "coffee bean cup brew milk morning",
        (
            "Coffee is made from roasted bean seeds.",
            "Many people brew a cup each morning.",
            "Add milk to make coffee softer.",
            "Too much coffee can hurt your sleep.",
        ),
    ),
}
TEMPLATES = (
    "Tell me about {}.",
    "What should I know about {}?",
    "Give me a few facts about {}.",
    "Explain {} simply.",
    "Give me tips about {}.",
    "I am curious about {}.",
    "Teach me about {}.",
    "Say something useful about {}.",
)
MODIFIERS = (
    "",
    " Keep it short.",
    " I am a beginner.",
    " It is for school.",
    " Please be clear.",
    " Thanks.",
    " Be friendly.",
    " I have a minute.",
)
OPENERS = ("Sure.", "Good question.", "Happy to help.")
CLOSINGS = ("Hope this helps.", "Let me know if you have questions.", "Enjoy learning more.")
WEIGHTS = {"on_topic": 0.4, "length": 0.2, "no_repeat": 0.2, "closing": 0.2}
LENGTH_RANGE = (15, 45)
_SUFFIXES = ("s", "es", "d", "ed", "ing")


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _matches(word: str, keys: set[str]) -> bool:
    """Keyword match up to a regular inflection ("rivers", "reading", "baked")."""
    if word in keys:
        return True
    return any(word.endswith(suf) and word[: -len(suf)] in keys for suf in _SUFFIXES)


def rubric(keywords: list[str], answer_text: str) -> dict[str, float]:
    """Per-criterion gold scores in [0, 1]."""
    sentences = _sentences(answer_text)
    closing = float(bool(sentences) and sentences[-1] in CLOSINGS)
    content = [s for s in sentences if s not in CLOSINGS and s not in OPENERS]
    keys = set(keywords)
    # Plural/possessive forms count ("rivers" for "river").
    # Repeated sentences count once, so repetition also dilutes topicality.
    on_topic = [any(_matches(w, keys) for w in _words(s)) for s in set(content)]
    n_words = len(_words(answer_text))
    lo, hi = LENGTH_RANGE
    length = min(1.0, n_words / lo) if n_words <= hi else max(0.0, 1.0 - (n_words - hi) / hi)
    no_repeat = 0.0
    if content:
        counts: dict[str, int] = {}
        for w in _words(" ".join(content)):
            if len(w) >= 4:
                counts[w] = counts.get(w, 0) + 1
        no_repeat = len(set(content)) / len(content)
        no_repeat *= 0.5 if counts and max(counts.values()) > 3 else 1.0
    return {
        "on_topic": sum(on_topic) / len(content) if content else 0.0,
        "length": length,
        "no_repeat": no_repeat,
        "closing": closing,
    }


def gold_score(example: base.Example, answer_text: str) -> float:
    """Hidden gold rubric in [0, 1] for the answer text (think block excluded)."""
    parts = rubric(example.meta["keywords"], answer_text)
    return sum(WEIGHTS[k] * v for k, v in parts.items())


def respond(rng: random.Random, topic: str, defect_rate: float) -> str:
    """A response about `topic`; each defect is applied with prob `defect_rate`."""
    facts = list(TOPICS[topic][1])
    n = rng.randint(2, 3)
    sentences = rng.sample(facts, n)
    if rng.random() < defect_rate:  # off-topic: swap sentences for another topic's
        other = rng.choice([t for t in sorted(TOPICS) if t != topic])
        k = rng.randint(1, n)
        sentences = rng.sample(TOPICS[other][1], k) + sentences[k:]
    if rng.random() < defect_rate:  # repetition
        sentences = sentences + [sentences[0]] * rng.randint(1, 2)
    if rng.random() < defect_rate:  # bad length: one bare sentence or rambling
        if rng.random() < 0.5:
            sentences = sentences[:1]
        else:
            pool = [s for t in sorted(TOPICS) for s in TOPICS[t][1] if s not in sentences]
            sentences = sentences + facts + rng.sample(pool, 2)
    if rng.random() < 0.3:
        sentences = [rng.choice(OPENERS)] + sentences
    if rng.random() >= defect_rate:
        sentences = sentences + [rng.choice(CLOSINGS)]
    return " ".join(sentences)


def sample(rng: random.Random, difficulty: int, split: str) -> tuple[str, str, str, dict]:
    """Draws one request: (prompt, thinking, answer, meta)."""
    del difficulty  # chat has a single level
    topic = rng.choice(sorted(TOPICS))
    prompt = rng.choice(TEMPLATES).format(topic) + rng.choice(MODIFIERS)
    # SFT responses are of mixed quality; RL/eval references are clean.
    answer = respond(rng, topic, 0.35 if split == "sft" else 0.0)
    thinking = f"topic: {topic}. plan: a few facts, then a polite close."
    meta = {"topic": topic, "keywords": TOPICS[topic][0].split()}
    return prompt, thinking, answer, meta
