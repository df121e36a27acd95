"""Tests of the instruction-following generator and its constraint checker."""

import pytest

from nemocascade.tasks import instruction, registry

C = {
    "count": {"kind": "count", "n": 3},
    "upper": {"kind": "case", "case": "upper"},
    "sep": {"kind": "sep", "sep": " | "},
    "include": {"kind": "include", "word": "wave"},
    "exclude": {"kind": "exclude", "word": "salt"},
    "prefix": {"kind": "prefix", "text": "Sure:"},
    "suffix": {"kind": "suffix", "text": "Done."},
    "json": {"kind": "json"},
    "maxlen": {"kind": "maxlen", "n": 20},
}


@pytest.mark.parametrize(
    ("names", "answer", "expected"),
    [
        (["count"], "wave tide reef", {"count": True}),
        (["count"], "wave tide", {"count": False}),
        (["upper"], "WAVE TIDE", {"case": True}),
        (["upper"], "WAVE tide", {"case": False}),
        (["sep"], "wave | tide | reef", {"sep": True}),
        (["sep"], "wave tide reef", {"sep": False}),
        (["sep"], "wave|tide|reef", {"sep": False}),
        (["include", "exclude"], "WAVE tide", {"include": True, "exclude": True}),
        (["include", "exclude"], "tide salt", {"include": False, "exclude": False}),
        (["prefix", "suffix"], "Sure: wave tide Done.", {"prefix": True, "suffix": True}),
        (["prefix", "suffix"], "wave tide Done.", {"prefix": False, "suffix": True}),
        (["json", "count"], '{"answer": "wave tide reef"}', {"json": True, "count": True}),
        (["json", "count"], "wave tide reef", {"json": False, "count": False}),
        (["json"], '{"answer": "wave", "x": 1}', {"json": False}),
        (["json"], '["wave"]', {"json": False}),
        (["maxlen"], "wave tide reef", {"maxlen": True}),
        (["maxlen"], "wave tide reef coral shore", {"maxlen": False}),
        (["upper", "prefix"], "Sure: WAVE TIDE", {"case": True, "prefix": True}),
        (
            ["upper", "sep", "json"],
            '{"answer": "WAVE | REEF"}',
            {"case": True, "sep": True, "json": True},
        ),
    ],
)
def test_check(names, answer, expected):
    assert instruction.check(answer, [C[n] for n in names]) == expected


def test_references_satisfy_every_constraint_outside_sft():
    for split in ("rl", "eval"):
        for e in registry.generate("if", split, 500, seed=0):
            assert all(instruction.check(e.answer, e.meta["constraints"]).values()), e


def test_sft_teacher_forgets_the_intended_kinds():
    examples = registry.generate("if", "sft", 2000, seed=0)
    forgettable = [
        e
        for e in examples
        if any(c["kind"] in instruction.FORGOTTEN_KINDS for c in e.meta["constraints"])
    ]
    results = [instruction.check(e.answer, e.meta["constraints"]) for e in examples]
    broken = [r for r in results if not all(r.values())]
    # Only the forgettable kinds are ever broken, one at a time, at about the set rate.
    assert all(sum(not v for v in r.values()) == 1 for r in broken)
    assert all(k in instruction.FORGOTTEN_KINDS for r in broken for k, v in r.items() if not v)
    assert abs(len(broken) / len(forgettable) - instruction.SFT_FORGET_RATE) < 0.07


def test_prompt_lists_every_constraint():
    for e in registry.generate("if", "eval", 50, seed=0):
        for c in e.meta["constraints"]:
            assert instruction.describe(c) in e.prompt
        kinds = [c["kind"] for c in e.meta["constraints"]]
        assert len(kinds) == e.difficulty + 1
        assert "exclude" in kinds and "count" in kinds
