"""GPU tile sweep of the fused log-prob forward (teacher/reference log-probs).

    PYTHONPATH=. python bench/fused_logprob_gpu_tune.py [--n=16384 --d=4096 --v=151936]

Times `forward_only=True` of `chunked_xla` and of `pallas_gpu` at several
`(token_block, vocab_block)` tiles side by side in one run (bf16 inputs) and
prints each tile's time over chunked XLA's; ends with one JSON line. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from bench.fused_logprob_gpu_check import _time
from nemocascade.kernels.fused_logprob import api

TILES = ((32, 128), (64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256))


def _forward(impl, tile=(None, None)):
    def f(h, w, t):
        return api.token_logprobs(
            h,
            w,
            t,
            forward_only=True,
            implementation=impl,
            interpret=False,
            token_block=tile[0],
            vocab_block=tile[1],
        )

    return jax.jit(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16_384)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--v", type=int, default=151_936)
    args = p.parse_args()
    if jax.default_backend() != "gpu":
        raise SystemExit(f"needs a GPU; jax.default_backend() is {jax.default_backend()!r}")
    k = jax.random.split(jax.random.key(0), 3)
    h = (jax.random.normal(k[0], (args.n, args.d)) * 0.5).astype(jnp.bfloat16)
    w = (jax.random.normal(k[1], (args.d, args.v)) * args.d**-0.5).astype(jnp.bfloat16)
    t = jax.random.randint(k[2], (args.n,), 0, args.v)
    base_fn = _forward("chunked_xla")
    base = _time(base_fn, (h, w, t), repeats=10)
    ref_lp, _ = base_fn(h, w, t)
    report = {"n": args.n, "d": args.d, "v": args.v, "chunked_xla_s": base}
    print(f"chunked_xla {base * 1e3:.2f} ms")
    for tile in TILES:
        name = f"pallas_gpu_{tile[0]}x{tile[1]}"
        try:
            fn = _forward("pallas_gpu", tile)
            s = _time(fn, (h, w, t), repeats=10)
            err = float(jnp.max(jnp.abs(fn(h, w, t)[0] - ref_lp)))
        except Exception as e:  # a tile that does not fit shared memory, say
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:200]}")
            report[name] = None
            continue
        report[name] = s / base
        print(f"{name}: {s * 1e3:.2f} ms, {s / base:.2f}x chunked, max |dlogp| {err:.2e}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
