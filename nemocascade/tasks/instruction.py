"""Instruction-following domain ("if"): word lists under verifiable constraints.

A request asks for words about a topic and adds IFEval-style constraints:
exact word count, letter case, separator, a required or forbidden word, a
fixed prefix or suffix, JSON wrapping `{"answer": "..."}` and a length limit.
Every request forbids one topic word and sets the word count; difficulty k
adds k - 1 other constraints. The reference lists the topic's words in their
fixed order (its first N words, the last swapped for the required word when
there is one), so the content is learnable and what a request tests is
whether every constraint is honoured. `check` is the gold verifier: it parses
the answer in a fixed order (JSON -> prefix/suffix -> words) and reports each
constraint. The SFT teacher is sloppy in a systematic way, like real
imperfect SFT data: in `SFT_FORGET_RATE` of its answers it runs one word
past the requested count (the topic's next word), every other constraint
kept. The rate is just above one half and the slip is one two-way choice at
a known position (stop after word N, or go on), so greedy imitation
inherits it while sampling at the RL temperature still stops in time about
a third of the time: a clean decision that IF-RL's all-constraints reward
can flip. RL/eval references are exact.
"""

from __future__ import annotations

import json
import random

SPLIT_LEVELS = {"sft": (1, 2, 3), "rl": (1, 2, 3), "eval": (1, 2, 3)}
SFT_FORGET_RATE = 0.6
FORGOTTEN_KINDS = ("count",)

TOPICS = {
    "the ocean": "wave salt tide reef fish shore deep blue coral whale",
    "a farm": "barn cow hay field goat corn pig tractor hen seed",
    "winter": "snow ice cold frost sled scarf coat storm white chill",
    "space": "star moon orbit comet planet rocket dark sun galaxy void",
    "music": "song drum beat tune piano note bass choir rhythm melody",
    "a city": "street tower bus crowd park bridge shop traffic light road",
    "the forest": "tree moss leaf fern owl pine deer trail bark root",
    "cooking": "salt pan oven spice bread soup knife stove flour herb",
    "sports": "ball goal team score race coach field match win run",
    "the desert": "sand dune heat cactus camel dry sun oasis wind rock",
    "school": "book desk pen class test chalk lesson note bell teacher",
    "the weather": "rain cloud wind sun storm fog hail mist thunder heat",
}
SEPARATORS = (", ", " | ", " - ", "; ")
PREFIXES = ("Sure:", "Answer:", "Here:", "Words:")
SUFFIXES = ("Done.", "The end.", "That is all.", "Enjoy!")
KINDS = ("count", "case", "sep", "include", "exclude", "prefix", "suffix", "json", "maxlen")


def describe(c: dict) -> str:
    """The request sentence for one constraint."""
    kind = c["kind"]
    if kind == "count":
        return f"Use exactly {c['n']} words."
    if kind == "case":
        return f"Write in all {c['case']}case letters."
    if kind == "sep":
        return f'Separate the words with "{c["sep"]}".'
    if kind == "include":
        return f'Include the word "{c["word"]}".'
    if kind == "exclude":
        return f'Do not use the word "{c["word"]}".'
    if kind == "prefix":
        return f'Start with "{c["text"]}".'
    if kind == "suffix":
        return f'End with "{c["text"]}".'
    if kind == "json":
        return 'Wrap it as {"answer": "..."}.'
    return f"Use at most {c['n']} characters."


def _short(c: dict) -> str:
    """Terse constraint name for the thinking trace."""
    kind = c["kind"]
    detail = {
        "count": lambda: f"{c['n']} words",
        "case": lambda: f"{c['case']}case",
        "sep": lambda: f'sep "{c["sep"]}"',
        "include": lambda: f"has {c['word']}",
        "exclude": lambda: f"no {c['word']}",
        "prefix": lambda: f'start "{c["text"]}"',
        "suffix": lambda: f'end "{c["text"]}"',
        "json": lambda: "json",
        "maxlen": lambda: f"max {c['n']} chars",
    }
    return detail[kind]()


def _content(answer: str, constraints: list[dict]) -> tuple[str | None, dict]:
    """Unwraps JSON / prefix / suffix; returns (word text, per-constraint results)."""
    by_kind = {c["kind"]: c for c in constraints}
    results: dict[str, bool] = {}
    text: str | None = answer.strip()
    if "json" in by_kind:
        try:
            obj = json.loads(text)
            ok = isinstance(obj, dict) and set(obj) == {"answer"} and isinstance(obj["answer"], str)
        except ValueError:
            ok = False
        results["json"] = ok
        text = obj["answer"].strip() if ok else None
    if text is not None and "prefix" in by_kind:
        prefix = by_kind["prefix"]["text"]
        results["prefix"] = text.startswith(prefix)
        text = text[len(prefix) :].strip() if results["prefix"] else text
    if text is not None and "suffix" in by_kind:
        suffix = by_kind["suffix"]["text"]
        results["suffix"] = text.endswith(suffix)
        text = text[: len(text) - len(suffix)].strip() if results["suffix"] else text
    return text, results


def check(answer: str, constraints: list[dict]) -> dict[str, bool]:
    """Gold check of every constraint on the final answer text."""
    text, results = _content(answer, constraints)
    sep = next((c["sep"] for c in constraints if c["kind"] == "sep"), None)
    if text is None:
        words = []
    elif sep is not None:
        words = [w.strip() for w in text.split(sep.strip())] if text else []
    else:
        words = text.split()
    lowered = [w.lower() for w in words]
    for c in constraints:
        kind = c["kind"]
        if kind in results:
            continue
        if text is None:
            results[kind] = False
        elif kind == "count":
            results[kind] = len(words) == c["n"]
        elif kind == "case":
            letters = "".join(ch for ch in text if ch.isalpha())
            want = letters.upper() if c["case"] == "upper" else letters.lower()
            results[kind] = bool(letters) and letters == want
        elif kind == "sep":
            # Each item must be one word, so a missing separator fails.
            results[kind] = len(words) > 1 and all(w and " " not in w for w in words)
            results[kind] = results[kind] and sep.join(words) == text
        elif kind == "include":
            results[kind] = c["word"] in lowered
        elif kind == "exclude":
            results[kind] = c["word"] not in lowered
        elif kind == "maxlen":
            results[kind] = len(answer.strip()) <= c["n"]
    # A JSON-, prefix- or suffix-less answer still fails those constraints.
    return {c["kind"]: results.get(c["kind"], False) for c in constraints}


def render(words: list[str], constraints: list[dict]) -> str:
    """Formats chosen words so they satisfy every constraint except maxlen."""
    by_kind = {c["kind"]: c for c in constraints}
    case = by_kind.get("case", {}).get("case")
    words = [w.upper() if case == "upper" else w for w in words]
    text = by_kind["sep"]["sep"].join(words) if "sep" in by_kind else " ".join(words)
    if "prefix" in by_kind:
        text = f"{by_kind['prefix']['text']} {text}"
    if "suffix" in by_kind:
        text = f"{text} {by_kind['suffix']['text']}"
    if "json" in by_kind:
        text = json.dumps({"answer": text})
    return text


def _violate(rng: random.Random, words, constraints, bank, targets) -> str:
    """An answer that breaks exactly one of `targets` (every other constraint holds)."""
    for c in rng.sample(targets, len(targets)):
        others = [o for o in constraints if o is not c]
        kind, broken = c["kind"], list(words)
        if kind == "count":
            extra = [w for w in bank if w not in broken and all(w != o.get("word") for o in others)]
            broken = broken + extra[:1]
        elif kind == "include":
            broken = [w for w in broken if w != c["word"]]
        elif kind == "exclude":
            # Replace the last word that no include constraint needs.
            needed = {o.get("word") for o in others if o["kind"] == "include"}
            i = max(j for j, w in enumerate(broken) if w not in needed)
            broken[i] = c["word"]
        if kind in ("case", "sep", "prefix", "suffix", "json"):
            text = render(broken, others)
            if kind == "case":
                flip = str.lower if c["case"] == "upper" else str.upper
                text = render([flip(w) if i == 0 else w for i, w in enumerate(broken)], others)
        elif kind == "maxlen":
            text = render(broken + [w for w in bank if w not in broken][:3], others)
        else:
            text = render(broken, others)
        result = check(text, constraints)
        if not result[kind] and sum(result.values()) == len(constraints) - 1:
            return text
    return render(words, constraints)


def sample(rng: random.Random, difficulty: int, split: str) -> tuple[str, str, str, dict]:
    """Draws one request: (prompt, thinking, answer, meta)."""
    topic = rng.choice(sorted(TOPICS))
    bank = TOPICS[topic].split()
    fixed = ("exclude", "count")
    kinds = [*fixed, *rng.sample([k for k in KINDS if k not in fixed], difficulty - 1)]
    rng.shuffle(kinds)
    n = rng.randint(3, 5)
    # Required and forbidden words come from the tail of the bank, which no
    # reference list reaches on its own.
    tail = rng.sample(bank[5:], 2)
    words = bank[:n] if "include" not in kinds else [*bank[: n - 1], tail[0]]
    constraints: list[dict] = []
    for kind in kinds:
        c: dict = {"kind": kind}
        if kind == "count":
            c["n"] = n
        elif kind == "case":
            c["case"] = rng.choice(["upper", "lower"])
        elif kind == "sep":
            c["sep"] = rng.choice(SEPARATORS)
        elif kind == "include":
            c["word"] = tail[0]
        elif kind == "exclude":
            c["word"] = tail[1]
        elif kind in ("prefix", "suffix"):
            c["text"] = rng.choice(PREFIXES if kind == "prefix" else SUFFIXES)
        constraints.append(c)
    if "maxlen" in kinds:
        # Leave a little slack over the reference answer, rounded to 5.
        length = len(render(words, constraints))
        next(c for c in constraints if c["kind"] == "maxlen")["n"] = (length // 5 + 2) * 5
    prompt = f"List words about {topic}. " + " ".join(describe(c) for c in constraints)
    answer = render(words, constraints)
    forgettable = [c for c in constraints if c["kind"] in FORGOTTEN_KINDS]
    if split == "sft" and forgettable and rng.random() < SFT_FORGET_RATE:
        answer = _violate(rng, words, constraints, bank, forgettable)
    thinking = f"need: {'; '.join(_short(c) for c in constraints)}\nwords: {' '.join(words)}"
    meta = {"constraints": constraints, "topic": topic}
    return prompt, thinking, answer, meta
