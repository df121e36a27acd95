"""Train-step throughput and MFU against this machine's measured matmul peak.

    python bench/train_throughput.py [--preset=small] [--batch=8] [--seq_len=256]

Measures, in one run: (1) the peak FLOP/s of a large jitted f32 matmul on
this machine, (2) the model FLOP/s of the SFT train step (forward + backward
+ AdamW) for the preset, (3) their ratio, "MFU vs measured peak", and (4)
the same step with the other layer layout (`nn.scan` over stacked layers vs
unrolled), with the speed ratio of the two. Ends with one JSON line of
headline figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from nemocascade import config as config_lib
from nemocascade.model import presets
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib, step as step_lib
from nemocascade.trainer.stages import sft


def _time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile + warm up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return best


def peak_matmul_flops(n: int = 2048, repeats: int = 5) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(lambda x, y: x @ y)
    return 2 * n**3 / _time(lambda: mm(a, b), repeats)


def sft_step(model: presets.ModelConfig, batch: int, seq_len: int, impl: str = ""):
    """(jitted SFT train step, its state, a random device batch, the mesh) for `model`."""
    cfg = config_lib.Config(stage="sft", model=model)
    cfg = dataclasses.replace(
        cfg,
        train=dataclasses.replace(cfg.train, batch_size=batch, seq_len=seq_len, logprob_impl=impl),
    )
    mesh = mesh_lib.make_mesh((1, -1, 1))
    rules = rules_lib.get_rules("fsdp")
    tx = optimizer.make(cfg.optim, 1000)
    _, shardings = state_lib.abstract_state(model, tx, mesh, rules)
    state = state_lib.create(model, tx, mesh, rules, jax.random.key(0))
    step = step_lib.make_train_step(
        sft.make_loss_fn(cfg),
        tx,
        num_microbatches=1,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
    )
    rng = np.random.default_rng(0)
    host = {
        "inputs": rng.integers(1, model.vocab_size, (batch, seq_len)),
        "targets": rng.integers(1, model.vocab_size, (batch, seq_len)),
        "loss_mask": np.ones((batch, seq_len)),
        "positions": np.tile(np.arange(seq_len), (batch, 1)),
        "segment_ids": np.ones((batch, seq_len)),
    }
    b = rules_lib.put_batch({k: v.astype(np.int32) for k, v in host.items()}, mesh, rules)
    return step, state, b, mesh


def train_step_flops(
    preset: str, batch: int, seq_len: int, impl: str, repeats: int, scan_layers: bool | None = None
):
    model = presets.get_preset(preset)
    if scan_layers is not None:
        model = dataclasses.replace(model, scan_layers=scan_layers)
    step, state, b, _ = sft_step(model, batch, seq_len, impl)
    key = jax.random.key(1)
    holder = {"state": state}

    def run():
        holder["state"], m = step(holder["state"], b, key)
        return m["loss"]

    seconds = _time(run, repeats)
    tokens_per_s = batch * seq_len / seconds
    return tokens_per_s, tokens_per_s * model.flops_per_token(seq_len), model.num_params


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=256)
    p.add_argument("--impl", default="", help="log-prob implementation ('' = platform default)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    peak = peak_matmul_flops(repeats=args.repeats)
    tps, flops, nparams = train_step_flops(
        args.preset, args.batch, args.seq_len, args.impl, args.repeats
    )
    scan = presets.get_preset(args.preset).scan_layers
    other, _, _ = train_step_flops(
        args.preset, args.batch, args.seq_len, args.impl, args.repeats, scan_layers=not scan
    )
    peak_after = peak_matmul_flops(repeats=args.repeats)  # bracket the step: the machine is shared
    peak = max(peak, peak_after)
    print(
        f"measured peak matmul      : {peak / 1e9:8.1f} GFLOP/s "
        f"(f32, 2048^3, best of {args.repeats})"
    )
    print(f"{args.preset} train step ({nparams / 1e6:.1f}M params, {args.batch}x{args.seq_len}):")
    print(f"  tokens/s                : {tps:8.0f}")
    print(f"  model FLOP/s            : {flops / 1e9:8.1f} GFLOP/s")
    print(f"  MFU vs measured peak    : {flops / peak:8.3f}")
    layout = {True: "scanned", False: "unrolled"}
    print(f"  {'tokens/s, ' + layout[not scan]:24s}: {other:8.0f}")
    print(f"  {'speed ' + layout[scan] + '/' + layout[not scan]:24s}: {tps / other:8.2f}x")
    print(
        json.dumps(
            {
                "preset": args.preset,
                "tokens_per_s": round(tps, 1),
                "model_flops_per_s": round(flops, 1),
                "peak_matmul_flops_per_s": round(peak, 1),
                "mfu_vs_measured_peak": round(flops / peak, 3),
                "scan_layers": scan,
                "speed_vs_other_layout": round(tps / other, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
