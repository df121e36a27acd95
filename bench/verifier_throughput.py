"""Code-verification throughput of the VerifierPool on the local CPUs.

    python bench/verifier_throughput.py [--n 256] [--workers 2] [--backend bwrap|rlimit]

Scores a batch of trivial correct programs (generated code tasks, reference
answers) through the sandbox with every limit enforced, after a warm-up
batch that starts the workers and their jailed servers. Goal on 2 cores:
>= 100 verifications/s. Ends with one JSON line of headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from nemocascade.rewards import pool, sandbox, verifiers
from nemocascade.tasks import registry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", choices=("bwrap", "rlimit"), default=None)
    args = parser.parse_args()
    if args.backend:
        os.environ[sandbox.BACKEND_ENV] = args.backend  # spawned workers inherit it
    examples = registry.generate("code", "eval", args.n, seed=0)
    batch = (
        ["code"] * args.n,
        [e.prompt for e in examples],
        [e.answer for e in examples],
        examples,
    )
    with pool.VerifierPool(num_workers=args.workers, timeout_s=10.0) as workers:
        warm = workers.score(*[b[: 2 * args.workers] for b in batch])
        assert all(r.score == 1.0 for r in warm), warm
        rates = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            results = workers.score(*batch)
            elapsed = time.perf_counter() - start
            passed = sum(r.score for r in results)
            rates.append(args.n / elapsed)
            rate = args.n / elapsed
            print(f"{args.n} programs in {elapsed:.3f}s: {rate:.1f}/s, {passed:.0f} passed")
    backends = {r.info.get("backend") for r in results}
    print(
        json.dumps(
            {
                "code_verifications_per_s": round(max(rates), 1),
                "median_per_s": round(sorted(rates)[len(rates) // 2], 1),
                "backend": ",".join(sorted(b for b in backends if b)),
                "workers": args.workers,
                "cpus": os.cpu_count(),
                "timeout_s": verifiers.CODE_TIMEOUT_S,
                "all_passed": passed == args.n,
            }
        )
    )


if __name__ == "__main__":
    main()
