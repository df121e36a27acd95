"""Benchmark: fused chunked log-prob vs materialized reference, forward + backward.

    python bench/fused_logprob.py                       # N=16384, D=1024, V=65536 (minutes)
    python bench/fused_logprob.py --n 2048 --v 8192     # quick

Each implementation runs in its own subprocess (so peak RSS is its own) and
reports: XLA's compiled memory analysis of the jitted `jax.grad` step (temp
bytes = everything but arguments and outputs), peak process RSS, and the median
wall time of the step after one warm-up. The step is the gradient w.r.t.
hidden and the unembedding of Σ g_logp·logp + g_H·H with random cotangents.
The last line printed is one JSON object with the headline ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

IMPLEMENTATIONS = ("reference", "chunked_xla")


def _parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384, help="tokens")
    parser.add_argument("--d", type=int, default=1024, help="hidden size")
    parser.add_argument("--v", type=int, default=65536, help="vocabulary size")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--token-block", type=int, default=None)
    parser.add_argument("--vocab-block", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2, help="timed steps after warm-up")
    parser.add_argument("--worker", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _worker(args: argparse.Namespace) -> dict:
    """Runs one implementation in this process and returns its measurements."""
    import jax
    import jax.numpy as jnp

    from nemocascade.kernels.fused_logprob import api

    k = jax.random.split(jax.random.key(0), 5)
    dtype = jnp.dtype(args.dtype)
    hidden = jax.random.normal(k[0], (args.n, args.d), dtype)
    w = (jax.random.normal(k[1], (args.d, args.v)) / args.d**0.5).astype(dtype)
    targets = jax.random.randint(k[2], (args.n,), 0, args.v)
    g_logp, g_ent = jax.random.normal(k[3], (args.n,)), jax.random.normal(k[4], (args.n,))
    blocks = {}
    if args.worker != "reference":
        blocks = dict(token_block=args.token_block, vocab_block=args.vocab_block)

    def loss(hidden, w):
        logp, ent = api.token_logprobs(hidden, w, targets, implementation=args.worker, **blocks)
        return jnp.sum(g_logp * logp + g_ent * ent)

    jax.block_until_ready((hidden, w, targets, g_logp, g_ent))
    rss_inputs = _peak_rss_bytes()
    t0 = time.perf_counter()
    step = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(hidden, w).compile()
    compile_s = time.perf_counter() - t0
    mem = step.memory_analysis()
    jax.block_until_ready(step(hidden, w))
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(step(hidden, w))
        times.append(time.perf_counter() - t0)
    times.sort()
    return {
        "implementation": args.worker,
        "temp_bytes": int(mem.temp_size_in_bytes),
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "peak_rss_bytes": _peak_rss_bytes(),
        "rss_after_inputs_bytes": rss_inputs,
        "compile_s": compile_s,
        "step_s": times[len(times) // 2],
    }


def _run_worker(implementation: str, argv: list[str]) -> dict:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv, "--worker", implementation],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args)))
        return
    gib = 2.0**30
    print(f"N={args.n} D={args.d} V={args.v} {args.dtype}: grad of Σ g·logp + g_H·H")
    results = {}
    for implementation in IMPLEMENTATIONS:
        r = results[implementation] = _run_worker(implementation, argv)
        print(
            f"  {implementation:12s} temp {r['temp_bytes'] / gib:7.3f} GiB  "
            f"peak RSS {r['peak_rss_bytes'] / gib:7.3f} GiB  "
            f"step {r['step_s']:8.2f} s  (compile {r['compile_s']:.1f} s)",
            flush=True,
        )
    ref, fused = results["reference"], results["chunked_xla"]
    headline = {
        "n": args.n,
        "d": args.d,
        "v": args.v,
        "dtype": args.dtype,
        "reference_temp_gib": ref["temp_bytes"] / gib,
        "chunked_temp_gib": fused["temp_bytes"] / gib,
        "temp_ratio": fused["temp_bytes"] / ref["temp_bytes"],
        "reference_peak_rss_gib": ref["peak_rss_bytes"] / gib,
        "chunked_peak_rss_gib": fused["peak_rss_bytes"] / gib,
        "peak_rss_ratio": fused["peak_rss_bytes"] / ref["peak_rss_bytes"],
        "reference_step_s": ref["step_s"],
        "chunked_step_s": fused["step_s"],
        "time_ratio": fused["step_s"] / ref["step_s"],
    }
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
