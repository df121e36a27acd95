"""Benchmark: math-verify answer checks per second in one process (no cache hits).

    python bench/math_answer_rate.py

Every pair is distinct, so neither math-verify's LaTeX parse cache nor our
gold cache helps; three kinds of answers (integers, fractions against
decimals, radicals). `verifiers.math` adds only the think-block split.
"""

from __future__ import annotations

import time

from nemocascade.rewards import math_answer

CASES = {
    "integer": [(f"so \\boxed{{{i}}}", str(i + i % 2)) for i in range(1000, 1400)],
    "fraction vs decimal": [(f"\\boxed{{\\frac{{{i}}}{{4}}}}", str(i / 4)) for i in range(400)],
    "radical": [(f"\\boxed{{{i}\\sqrt{{2}}}}", f"\\sqrt{{{2 * i * i}}}") for i in range(1, 201)],
}


def main() -> None:
    math_answer.check("\\boxed{1}", "1")  # imports and first-use setup
    for name, pairs in CASES.items():
        start = time.perf_counter()
        equal = sum(math_answer.check(answer, gold)[0] for answer, gold in pairs)
        rate = len(pairs) / (time.perf_counter() - start)
        print(f"{name:>20}: {len(pairs)} distinct checks, {equal} equal, {rate:.0f} checks/s")


if __name__ == "__main__":
    main()
