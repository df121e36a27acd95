"""Benchmark: attention implementations vs the reference, forward + backward, on CPU.

    python bench/attention.py                      # T = 2K, 8K, 16K (about 2 minutes)
    python bench/attention.py --lengths 2048 --impls xla,chunked_xla,splash,pallas_gpu

Per implementation and length: XLA's compiled memory analysis of the jitted
`jax.value_and_grad` step (temp bytes = everything but arguments and outputs:
the attention's own working memory) and the median wall time of the step
after one warm-up. The step is the gradient w.r.t. q, k, v of Σ out · g with
a random cotangent, causal + two packed segments per row + GQA. Pallas kernels
run in interpret mode on CPU: their times are reported (`interpret: true`) but
say nothing about the hardware kernels. The reference (`xla`) is compiled at
every length but only run up to `--max-ref-run` (its 16K step needs ~20 GB);
above that its time is extrapolated as (T/T_run)² × the longest measured run
(`estimated: true`). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.kernels.attention import api

PALLAS = ("splash", "pallas_gpu")


def _parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="2048,8192,16384", help="comma-separated T")
    parser.add_argument("--impls", default="xla,chunked_xla", help="comma-separated names")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2, help="query heads N")
    parser.add_argument("--kv-heads", type=int, default=1, help="kv heads K")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--block", type=int, default=None, help="query block / Pallas tile")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps after warm-up")
    parser.add_argument("--max-ref-run", type=int, default=8192, help="longest T the xla runs")
    parser.add_argument("--max-pallas-run", type=int, default=2048, help="longest interpret T")
    return parser.parse_args(argv)


def _inputs(args, t: int):
    rng = np.random.default_rng(0)
    dtype = jnp.dtype(args.dtype)
    b, n, k, h = args.batch, args.heads, args.kv_heads, args.head_dim
    q, kk, v, g = (jnp.asarray(rng.normal(size=(b, t, heads, h)), dtype) for heads in (n, k, k, n))
    seg = jnp.asarray(np.where(np.arange(t) < t // 2, 1, 2)[None].repeat(b, 0), jnp.int32)
    slot = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    return (q, kk, v), (slot, seg, g)


def _step(impl: str, block: int | None):
    def loss(qkv, aux):
        slot, seg, g = aux
        out = api.attention(
            *qkv, slot, seg, slot, seg, implementation=impl, self_attention=True, block=block
        )
        return jnp.sum(out.astype(jnp.float32) * g.astype(jnp.float32))

    return jax.jit(jax.value_and_grad(loss))


def measure(args, impl: str, t: int) -> dict:
    qkv, aux = _inputs(args, t)
    compiled = _step(impl, args.block).lower(qkv, aux).compile()
    row = {
        "impl": impl,
        "T": t,
        "temp_bytes": int(compiled.memory_analysis().temp_size_in_bytes),
        "interpret": impl in PALLAS,
    }
    limit = args.max_pallas_run if impl in PALLAS else args.max_ref_run
    if (impl == "xla" or impl in PALLAS) and t > limit:
        return row | {"seconds": None}
    jax.block_until_ready(compiled(qkv, aux))
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(qkv, aux))
        times.append(time.perf_counter() - start)
    return row | {"seconds": float(np.median(times))}


def main(argv=None) -> dict:
    args = _parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    impls = [api.resolve(x) for x in args.impls.split(",")]
    rows = [measure(args, impl, t) for t in lengths for impl in impls]
    ref_runs = {r["T"]: r["seconds"] for r in rows if r["impl"] == "xla" and r["seconds"]}
    for r in rows:
        print(json.dumps(r))
    headline = {
        "bench": "attention",
        "backend": jax.default_backend(),
        "shape": {
            "B": args.batch,
            "N": args.heads,
            "K": args.kv_heads,
            "H": args.head_dim,
            "dtype": args.dtype,
        },
    }
    for r in rows:
        if r["impl"] == "xla":
            continue
        ref = next(x for x in rows if x["impl"] == "xla" and x["T"] == r["T"])
        ref_s, estimated = ref["seconds"], False
        if ref_s is None and ref_runs:
            t_run = max(ref_runs)
            ref_s, estimated = ref_runs[t_run] * (r["T"] / t_run) ** 2, True
        key = f"{r['impl']}@{r['T']}"
        headline[key] = {
            "mem_ratio": round(r["temp_bytes"] / ref["temp_bytes"], 4),
            "temp_MiB": round(r["temp_bytes"] / 2**20, 1),
            "ref_temp_MiB": round(ref["temp_bytes"] / 2**20, 1),
            "seconds": r["seconds"] and round(r["seconds"], 3),
            "ref_seconds": ref_s and round(ref_s, 3),
            "ref_time_estimated": estimated,
            "time_ratio": round(r["seconds"] / ref_s, 3) if r["seconds"] and ref_s else None,
            "interpret": r["interpret"],
        }
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    if "xla" not in _parse_args().impls.split(","):
        raise SystemExit("--impls must include xla (the reference)")
    main()
