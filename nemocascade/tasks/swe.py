"""SWE domain: agentless repair of a tiny repository with SEARCH/REPLACE edits.

A repository is a chain of two one-line functions over ints, the entry point
`run` calling the helper `step`, in one or two files (an import between
them), listed in shuffled order. A comment under each `def` states what the function should do
(`# plus 4`); one function's code disagrees with its comment (a wrong
constant or operator). The issue reports the entry point's wrong output on
one input:

    Issue: run(3) returns 12, expected 14.

    ### util.py
    def step(x):
        # plus 4
        return x + 3

    ### main.py
    from util import step

    def run(x):
        # times 2
        return step(x) * 2

Difficulty 1: both functions in one file; 2: two files; 3: two files and a
distractor file the chain never calls (C1's "mixed localization" prompts;
levels 1–2 are its ground-truth-files-only prompts). The thinking trace
follows the calls from the entry point inwards; for each function it copies
the three lines from the files, then writes what the comment asks beside
what the code does and the verdict, until the disagreeing line:

    def run(x):
        # times 2
        return step(x) * 2
    * 2 vs * 2: ok
    def step(x):
        # plus 4
        return x + 3
    + 4 vs + 3: wrong
    fix util.py

Copying the lines verbatim and putting the two operator/constant pairs side
by side turn the comparison into short-range steps the tiny model can learn
(a trace that only named the verdict, `step: plus 4 not + 3`, was copied
wrongly in most sampled fixes). The answer is one SEARCH/REPLACE edit of that
line, the golden patch its unified diff, and the hidden tests
(`check(candidate)` on the entry point, four inputs) fail before it and pass
after it.

The SFT teacher does not follow the call: when the entry point is right (the
bug is in the helper), in `SFT_SYMPTOM_RATE` of those answers it stops after
the entry point's `ok` and special-cases the reported input there (`patch run
for x == 3`, answer `if x == 3: return 14` above the return line), which
makes the issue's example pass and fails the hidden tests (at least two other
inputs expose the bug). Greedy imitation inherits the habit at that branch
while sampling still follows the call; the execution-free reward pays the
symptom patch 0 when it lands in another file than the golden patch (levels
2–3) and about 0.4 in the same file (level 1), the real fix up to 1, so SWE
RL has one decision to flip. RL and eval references are real fixes.
"""

from __future__ import annotations

import random

from nemocascade.tasks import patch_format

SPLIT_LEVELS = {"sft": (1, 2, 3), "rl": (1, 2, 3), "eval": (1, 2, 3)}
SFT_SYMPTOM_RATE = 0.6
NUM_TESTS = 4
# Names are fixed by role (helper, entry point, distractor): with names drawn
# from a pool of 28, the 1.8M-parameter tiny model copied the wrong name into
# half of its edits after SFT; what it has to learn here is to compare each
# comment with its code and to fix the disagreeing line.
FUNCTIONS = ("step", "run")  # the helper, the entry point
MODULES = ("util", "main")  # the helper's file (two-file levels), the entry point's
DISTRACTOR = ("other", "lib")  # the function and file the chain never calls
_OPS = {"plus": "+", "minus": "-", "times": "*"}
# (functions in the call chain, files they live in, distractor files) per
# difficulty: level 3 is C1's mixed localization, an unrelated file mixed in.
LEVELS = {1: (2, 1, 0), 2: (2, 2, 0), 3: (2, 2, 1)}


def _value(op: str, a: int, c: int) -> int:
    return a + c if op == "plus" else a - c if op == "minus" else a * c


def _evaluate(chain: list[tuple[str, int]], x: int) -> int:
    """The entry point's value; `chain` runs from the innermost function out."""
    for op, c in chain:
        x = _value(op, x, c)
    return x


def _bug(rng: random.Random, op: str, c: int) -> tuple[str, int]:
    """A wrong (operator, constant) for a line that should be `op c`."""
    while True:
        if rng.random() < 0.5:
            bad = (op, rng.randint(1, 9))
        else:
            bad = (rng.choice([o for o in _OPS if o != op]), c)
        if bad != (op, c) and not (bad[0] == "times" and bad[1] == 1):
            return bad


def _line(arg: str, op: str, c: int) -> str:
    return f"    return {arg} {_OPS[op]} {c}"


def _block(name: str, arg: str, want: tuple[str, int], have: tuple[str, int]) -> str:
    """One function as the files show it: def line, comment (what it should do), code."""
    return f"def {name}(x):\n    # {want[0]} {want[1]}\n{_line(arg, *have)}"


def _source(names, args, files_of, imports, true_ops, bug_at, bad) -> dict[str, str]:
    """{path: content}; function i lives in file files_of[i]."""
    bodies: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        op, c = bad if i == bug_at else true_ops[i]
        block = _block(name, args[i], true_ops[i], (op, c)) + "\n"
        bodies.setdefault(files_of[i], []).append(block)
    return {
        path: "".join(imports.get(path, [])) + ("\n" if path in imports else "") + "\n\n".join(b)
        for path, b in bodies.items()
    }


def sample(rng: random.Random, difficulty: int, split: str) -> tuple[str, str, str, dict]:
    """Draws one repository and issue: (prompt, thinking, answer, meta)."""
    num_fns, num_files, num_distractors = LEVELS[difficulty]
    while True:
        names = list(FUNCTIONS)  # names[0] is the innermost
        paths = [f"{m}.py" for m in MODULES[-num_files:]]
        files_of = [paths[min(i, num_files - 1)] for i in range(num_fns)]
        args = ["x"] + [f"{names[i - 1]}(x)" for i in range(1, num_fns)]
        true_ops = [(rng.choice(list(_OPS)), rng.randint(2, 9)) for _ in range(num_fns)]
        bug_at = rng.randrange(num_fns)
        bad = _bug(rng, *true_ops[bug_at])
        buggy_ops = [bad if i == bug_at else t for i, t in enumerate(true_ops)]
        inputs = rng.sample(range(1, 10), NUM_TESTS)
        good = [_evaluate(true_ops, x) for x in inputs]
        wrong = [_evaluate(buggy_ops, x) for x in inputs]
        # The issue's input and at least two more must expose the bug, so
        # special-casing the reported input cannot pass the hidden tests.
        if good[0] != wrong[0] and sum(g != w for g, w in zip(good, wrong, strict=True)) >= 3:
            break
    imports: dict[str, list[str]] = {}
    for i in range(1, num_fns):
        if files_of[i] != files_of[i - 1]:
            module = files_of[i - 1].removesuffix(".py")
            imports.setdefault(files_of[i], []).append(f"from {module} import {names[i - 1]}\n")
    files = _source(names, args, files_of, imports, true_ops, bug_at, bad)
    fixed = _source(names, args, files_of, imports, true_ops, -1, bad)
    for name, module in [DISTRACTOR] * num_distractors:
        op, c = rng.choice(list(_OPS)), rng.randint(2, 9)
        files[f"{module}.py"] = fixed[f"{module}.py"] = (
            f"def {name}(x):\n    # {op} {c}\n{_line('x', op, c)}\n"
        )
    top, x0 = names[-1], inputs[0]
    issue = f"{top}({x0}) returns {wrong[0]}, expected {good[0]}."
    listing = "\n".join(f"### {p}\n{files[p]}" for p in rng.sample(sorted(files), len(files)))
    prompt = f"Issue: {issue}\n\n{listing}"
    trace = []
    edit = (files_of[bug_at], _line(args[bug_at], *bad), _line(args[bug_at], *true_ops[bug_at]))
    lazy = split == "sft" and bug_at < num_fns - 1 and rng.random() < SFT_SYMPTOM_RATE
    for i in reversed(range(num_fns)):  # from the entry point inwards
        want, have = true_ops[i], buggy_ops[i]
        trace.append(_block(names[i], args[i], want, have))
        verdict = "ok" if i != bug_at else "wrong"
        trace.append(f"{_OPS[want[0]]} {want[1]} vs {_OPS[have[0]]} {have[1]}: {verdict}")
        if lazy:  # the habit: the entry point is right, so special-case it
            top_line = _line(args[-1], *buggy_ops[-1])
            patch = f"    if x == {x0}:\n        return {good[0]}\n{top_line}"
            edit = (files_of[-1], top_line, patch)
            trace.append(f"patch {top} for x == {x0}")
            break
        if i == bug_at:
            trace.append(f"fix {files_of[bug_at]}")
            break
    cases = zip(inputs, good, strict=True)
    asserts = "".join(f"    assert candidate({x}) == {y}\n" for x, y in cases)
    meta = {
        "files": files,
        "golden_patch": patch_format.make_patch(files, fixed),
        "hidden_test": f"def check(candidate):\n{asserts}",
        "entry_point": top,
        "bug_file": files_of[bug_at],
    }
    return prompt, "\n".join(trace), patch_format.edit_text(*edit), meta
