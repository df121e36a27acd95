"""Rollout throughput: continuous batching vs the static sampler, and shared prompt prefill.

    python bench/rollout_throughput.py [--preset=small] [--requests=256] [--max_new_tokens=512]
    python bench/rollout_throughput.py --tiny     # seconds-long smoke run

Length-skewed workload: `--requests` random prompts, each response length
drawn from a log-normal (long tail) with mean `--mean_len`, clipped to
[1, max_new_tokens]; a row of length L is ended by forcing the stop token at
completion index L-1 (a per-row thinking budget of L-1 whose forced close is
the stop token), so the lengths hold with random weights. Seeded sampling;
both engines draw the same tokens (checked), so their useful tokens are equal.

Three runs of the same requests, each timed after its programs compiled:
  * `static`: `decoding.generate` on all requests in one batch (runs until the
    longest row ends);
  * `static_same_memory`: `decoding.generate` in batches of `--slots` rows,
    the KV-cache memory the continuous engine uses;
  * `continuous`: `continuous.generate` with `--slots` slots.
Useful generated tokens/s = sum of the rows' lengths / wall seconds.

Shared prefill: `--group` rollouts of each of `--shared_prompts` prompts of
`--shared_prompt_len` tokens, all admitted at once; the continuous engine's
prefill seconds with and without `share_prefill`. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # the bench helpers and the repository

import decode_throughput  # noqa: E402  (random_params)

from nemocascade.model import presets  # noqa: E402
from nemocascade.rollout import continuous, decoding, sampling_methods  # noqa: E402

STOP = 1  # the forced stop token


def response_lengths(n: int, mean: float, cap: int, seed: int, sigma: float = 1.0) -> np.ndarray:
    """Long-tailed lengths: log-normal clipped to [1, cap], shifted so the sample mean ≈ `mean`."""
    z = np.random.default_rng(seed).standard_normal(n)
    mu = np.log(mean) - sigma**2 / 2
    for _ in range(20):  # clipping at the cap lowers the mean: raise mu to compensate
        lengths = np.clip(np.rint(np.exp(mu + sigma * z)), 1, cap)
        mu += np.log(mean / lengths.mean())
    return lengths.astype(np.int32)


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, vocab, size=length).tolist() for _ in range(n)]


def _kwargs(lengths, max_new, seed):
    return {
        "method": sampling_methods.Sample(temperature=1.0),
        "max_new_tokens": max_new,
        "stop_ids": (STOP,),
        "rng": jax.random.key(seed),
        "thinking_budget": [int(x) - 1 for x in lengths],
        "think_close_ids": (STOP,),
        "think_end_id": -1,  # never sampled: only the forced stop ends the block
    }


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def throughput(cfg, params, args) -> dict:
    n, m, s = args.requests, args.max_new_tokens, args.slots
    prompts = _prompts(n, args.prompt_len, cfg.vocab_size, seed=1)
    lengths = response_lengths(n, args.mean_len, m, seed=2)
    kw = _kwargs(lengths, m, seed=3)
    ones = _kwargs(np.ones(n, np.int32), m, seed=3)  # same shapes, one step: compiles only

    def static_batches(kwargs, size):
        outs = []
        for i in range(0, n, size):
            part = {**kwargs, "thinking_budget": kwargs["thinking_budget"][i : i + size]}
            outs.append(decoding.generate(params, cfg, prompts[i : i + size], **part))
        return outs

    def cont(kwargs, reqs=prompts, stats=None):
        return continuous.generate(
            params, cfg, reqs, num_slots=s, chunk_steps=args.chunk_steps, stats=stats, **kwargs
        )

    static_batches(ones, n)
    static_batches(ones, s)
    # Every prefill bucket (1, 2, 4, .., slots unique prompts) and harvest bucket.
    k = 1
    while k <= s and n > s:
        part = {**ones, "thinking_budget": ones["thinking_budget"][: s + k]}
        cont(part, prompts[: s + k])
        k *= 2
    cont(ones)

    (static,), static_s = _timed(lambda: static_batches(kw, n))
    _, same_mem_s = _timed(lambda: static_batches(kw, s))
    stats = {}
    cont_out, cont_s = _timed(lambda: cont(kw, stats=stats))
    same = bool(
        np.array_equal(static.completion_tokens, cont_out.completion_tokens)
        and np.allclose(static.logprobs, cont_out.logprobs, atol=1e-4)
    )
    useful = int(cont_out.lengths.sum())
    return {
        "requests": n,
        "max_new_tokens": m,
        "slots": s,
        "chunk_steps": args.chunk_steps,
        "target_mean_len": args.mean_len,
        "mean_len": round(float(cont_out.lengths.mean()), 1),
        "max_len": int(cont_out.lengths.max()),
        "useful_tokens": useful,
        "static_s": round(static_s, 2),
        "static_same_memory_s": round(same_mem_s, 2),
        "continuous_s": round(cont_s, 2),
        "static_tok_s": round(useful / static_s, 1),
        "static_same_memory_tok_s": round(useful / same_mem_s, 1),
        "continuous_tok_s": round(useful / cont_s, 1),
        "speedup_vs_static": round(static_s / cont_s, 2),
        "speedup_vs_static_same_memory": round(same_mem_s / cont_s, 2),
        "continuous_chunks": stats["chunks"],
        "same_tokens": same,
    }


def shared_prefill(cfg, params, args) -> dict:
    g, u = args.group, args.shared_prompts
    unique = _prompts(u, args.shared_prompt_len, cfg.vocab_size, seed=4)
    prompts = [q for q in unique for _ in range(g)]
    kw = _kwargs(np.full(len(prompts), 2, np.int32), 4, seed=5)
    row = {"prompt_len": args.shared_prompt_len, "group": g, "prompts": u}
    for share in (True, False):
        run = {}
        for _ in range(2):  # the first call compiles
            run = {}
            continuous.generate(
                params, cfg, prompts, num_slots=len(prompts), share_prefill=share, stats=run, **kw
            )
        key = "shared" if share else "separate"
        row[f"{key}_prefill_s"] = round(run["prefill_s"], 4)
        row[f"{key}_prefilled_prompts"] = run["prefill_prompts"]
    row["prefill_speedup"] = round(row["separate_prefill_s"] / row["shared_prefill_s"], 2)
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max_new_tokens", type=int, default=512)
    parser.add_argument("--mean_len", type=float, default=128.0)
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--chunk_steps", type=int, default=16)
    parser.add_argument("--shared_prompt_len", type=int, default=256)
    parser.add_argument("--shared_prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tiny", action="store_true", help="tiny preset, a few requests")
    args = parser.parse_args(argv)
    if args.tiny:
        args.preset, args.requests, args.max_new_tokens, args.mean_len = "tiny", 12, 24, 6.0
        args.prompt_len, args.slots, args.chunk_steps = 8, 4, 4
        args.shared_prompt_len, args.shared_prompts, args.group = 32, 2, 4
    return args


def main(argv=None):
    args = parse_args(argv)
    cfg = presets.get_preset(args.preset)
    params = decode_throughput.random_params(cfg)
    print(f"backend={jax.default_backend()} preset={args.preset} load={os.getloadavg()[0]:.2f}")
    t = throughput(cfg, params, args)
    print(
        f"{t['requests']} requests, lengths mean {t['mean_len']} max {t['max_len']} "
        f"(cap {t['max_new_tokens']}): static {t['static_tok_s']} tok/s ({t['static_s']} s) | "
        f"static in {t['slots']}-row batches {t['static_same_memory_tok_s']} tok/s | "
        f"continuous ({t['slots']} slots) {t['continuous_tok_s']} tok/s ({t['continuous_s']} s): "
        f"{t['speedup_vs_static']}x, {t['speedup_vs_static_same_memory']}x same memory; "
        f"same tokens: {t['same_tokens']}"
    )
    sp = shared_prefill(cfg, params, args)
    print(
        f"shared prefill ({sp['prompts']} prompts x {sp['group']}, {sp['prompt_len']} tokens): "
        f"{sp['shared_prefill_s']} s vs {sp['separate_prefill_s']} s separate: "
        f"{sp['prefill_speedup']}x"
    )
    print(
        json.dumps(
            {
                "bench": "rollout_throughput",
                "backend": jax.default_backend(),
                "preset": args.preset,
                "load_1m": round(os.getloadavg()[0], 2),
                "throughput": t,
                "shared_prefill": sp,
            }
        )
    )


if __name__ == "__main__":
    main()
