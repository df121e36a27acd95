"""Verifier throughput of the VerifierPool on the local CPUs.

    python bench/verifier_throughput.py [--n 256] [--stdio 128] [--math 256]
        [--workers 2] [--backend bwrap|rlimit]

Three workloads, each after a warm-up batch that starts the workers and
their jailed servers, every sandbox limit enforced:

* `builtin`: the task world's code tasks (one function, about 6 calls each);
* `stdio`: stdin/stdout programs with 20 cases each (distinct programs,
  every answer right), the Codeforces/LiveCodeBench shape;
* `math`: math-verify equivalence checks (`verifiers.math` on records with
  a gold `answer` string: fractions, radicals, intervals, decimals).

Goals on 2 cores with bwrap: >= 100 builtin verifications/s, >= 50 stdio
programs/s. Ends with one JSON line of headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from nemocascade.rewards import pool, sandbox
from nemocascade.tasks import base as tasks_base, registry

CASES = 20
# (program, host-side reference) pairs: each program reads "a b" and prints one line.
_STDIO_KINDS = (
    ("a, b = map(int, input().split())\nprint(a * {k} + b)", lambda a, b, k: f"{a * k + b}"),
    (
        "import sys\na, b = map(int, sys.stdin.read().split())\nprint(max(a, b) % {k}, min(a, b))",
        lambda a, b, k: f"{max(a, b) % k} {min(a, b)}",
    ),
    (
        "from math import gcd\na, b = map(int, input().split())\nprint(gcd(a, b) + {k})",
        lambda a, b, k: f"{__import__('math').gcd(a, b) + k}",
    ),
    (
        "def main():\n    a, b = map(int, open(0).read().split())\n"
        "    print(' '.join(str(a + i) for i in range({k})))\n\nmain()",
        lambda a, b, k: " ".join(str(a + i) for i in range(k)),
    ),
)
# (gold, answer) templates; `i` makes every check distinct (math_answer caches parses).
_MATH = (
    ("\\frac{{{i}}}{{{j}}}", "The answer is \\boxed{{\\frac{{{i2}}}{{{j2}}}}}."),
    ("\\sqrt{{{i}}}", "so \\boxed{{\\sqrt{{{i}}}}}"),
    ("(0,{i}]", "\\boxed{{(0, {i}]}}"),
    ("{i}", "\\boxed{{{i}}}"),
    ("{i}.5", "\\boxed{{\\frac{{{i2p1}}}{{2}}}}"),
    ("{i}\\pi", "\\boxed{{{i} \\pi}}"),
    ("x^2+{i}", "\\boxed{{{i} + x^2}}"),
    ("\\{{1,{i}\\}}", "\\boxed{{\\{{{i}, 1\\}}}}"),
)


def stdio_batch(n: int, seed: int = 0) -> list[tasks_base.Example]:
    rng = random.Random(seed)
    examples = []
    for i in range(n):
        template, reference = _STDIO_KINDS[i % len(_STDIO_KINDS)]
        k = rng.randint(2, 9)
        pairs = [(rng.randint(1, 10**6), rng.randint(1, 10**6)) for _ in range(CASES)]
        tests = {
            "inputs": [f"{a} {b}\n" for a, b in pairs],
            "outputs": [reference(a, b, k) + "\n" for a, b in pairs],
        }
        answer = f"```python\n{template.format(k=k)}\n```"
        examples.append(tasks_base.Example(f"s{i}", "code", 1, "", "", answer, {"tests": tests}))
    return examples


def math_batch(n: int, offset: int = 0) -> list[tasks_base.Example]:
    examples = []
    for i in range(offset, offset + n):
        gold, answer = _MATH[i % len(_MATH)]
        v = {"i": i + 2, "j": i + 3, "i2": 2 * (i + 2), "j2": 2 * (i + 3), "i2p1": 2 * i + 5}
        meta = {"answer": gold.format(**v)}
        examples.append(tasks_base.Example(f"m{i}", "math", 1, "", "", answer.format(**v), meta))
    return examples


def measure(workers, name: str, batches: list[list]) -> tuple[float, float, bool]:
    """(best rate, median rate, all scored 1) over the timed `batches`."""

    def score(examples):
        texts = [e.prompt for e in examples], [e.answer for e in examples]
        return workers.score([name] * len(examples), *texts, examples)

    warm = score(batches[0][: 2 * workers.num_workers])
    assert all(r.score == 1.0 for r in warm), warm
    rates, all_passed = [], True
    for examples in batches:
        start = time.perf_counter()
        results = score(examples)
        elapsed = time.perf_counter() - start
        passed = sum(r.score for r in results)
        all_passed &= passed == len(examples)
        rates.append(len(examples) / elapsed)
        print(f"{name}: {len(examples)} in {elapsed:.3f}s: {rates[-1]:.1f}/s, {passed:.0f} passed")
    return max(rates), sorted(rates)[len(rates) // 2], all_passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="builtin code tasks (0 = skip)")
    parser.add_argument("--stdio", type=int, default=128, help="stdin/stdout programs (0 = skip)")
    parser.add_argument("--math", type=int, default=256, help="math-verify checks (0 = skip)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", choices=("bwrap", "rlimit"), default=None)
    args = parser.parse_args()
    if args.backend:
        sandbox.configure(args.backend)  # spawned workers inherit the choice
    headline = {"backend": sandbox.available_backend(), "workers": args.workers}
    headline["cpus"] = os.cpu_count()
    runs = []
    if args.n:
        builtin = registry.generate("code", "eval", args.n, seed=0)
        runs.append(("code", "code", "verifications", [builtin] * args.repeats))
    if args.stdio:
        runs.append(("stdio", "code", "programs", [stdio_batch(args.stdio)] * args.repeats))
        headline["stdio_cases_per_program"] = CASES
    if args.math:
        batches = [math_batch(args.math, r * args.math) for r in range(args.repeats)]
        runs.append(("math", "math", "checks", batches))
    with pool.VerifierPool(num_workers=args.workers, timeout_s=30.0) as workers:
        for key, verifier, unit, batches in runs:
            best, median, ok = measure(workers, verifier, batches)
            headline[f"{key}_{unit}_per_s"] = round(best, 1)
            headline[f"{key}_median_per_s"] = round(median, 1)
            headline[f"{key}_all_passed"] = ok
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
