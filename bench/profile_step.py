"""Profile one SFT train step: where its time goes, by part of the model.

    python bench/profile_step.py [--preset=tiny] [--batch=16] [--seq_len=320] [--trace_dir=DIR]
    python bench/profile_step.py --attention_impl=xla      # the reference attention
    python bench/profile_step.py --batch=128 --seq_len=160 \
        --model_fields='{"d_model": 256, "num_heads": 4, "head_dim": 64, "d_ff": 768}'  # peers

Runs the step a few times, records `--steps` of them with `jax.profiler`
(the trace lands in `--trace_dir`; open it with TensorBoard's profile plugin
or xprof), then sums the trace's per-op times by the model part each XLA op
came from: the op's `op_name` metadata in the compiled HLO names the layer,
the module (attention core, q/k/v/o projections, q/k norms, MLP, norms) and
forward vs backward (`transpose(jvp(...))`). Thread time, summed over XLA:CPU's
worker threads, is reported beside the wall time of a step. Also prints
XLA's cost analysis of the compiled step (FLOPs and bytes accessed) and the
model FLOPs (6·N·tokens + attention). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import time

import jax
import train_throughput

from nemocascade.model import presets

_SKIP = ("ThunkExecutor", "Await", "PjitFunction")


def _part(op_name: str) -> str:
    """The model part an HLO op's `op_name` metadata points to."""
    m = re.search(r"layer_\d+/(\w+)(?:/(\w+))?", op_name)
    if m is None:
        if "final_norm" in op_name or "embed" in op_name:
            return "embedding, final norm"
        return "log-prob, loss, optimizer, other"
    module, sub = m.group(1), m.group(2) or ""
    if module != "attn":
        return {"mlp": "MLP (SwiGLU)"}.get(module, "RMSNorms, residual adds")
    if re.fullmatch(r"[qkvo]_proj", sub):
        return "attention q/k/v/o projections"
    if sub in ("q_norm", "k_norm"):
        return "attention q/k norms"
    return "attention core (scores, softmax, PV)"


def _breakdown(trace_dir: str, hlo_text: str, steps: int) -> dict[str, float]:
    meta = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = .*op_name=\"([^\"]+)\"", line)
        if m:
            meta.setdefault(m.group(1), m.group(2))
    path = sorted(glob.glob(os.path.join(trace_dir, "plugins/profile/*/*.trace.json.gz")))[-1]
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    ms = collections.defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or e["name"].startswith("$") or any(s in e["name"] for s in _SKIP):
            continue
        if e["name"] not in meta:
            continue  # host-side events
        op = meta[e["name"]]
        part = _part(op)
        if "transpose(jvp" in op:
            part += " [bwd]"
        ms[part] += e["dur"] / 1e3 / steps
    return dict(sorted(ms.items(), key=lambda kv: -kv[1]))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq_len", type=int, default=320)
    p.add_argument("--attention_impl", default="", help="model.attention_impl ('' = default)")
    p.add_argument("--model_fields", default="{}", help="JSON preset overrides (d_model, ...)")
    p.add_argument("--steps", type=int, default=3, help="steps recorded in the trace")
    p.add_argument("--trace_dir", default="/tmp/nemocascade_profile")
    args = p.parse_args(argv)

    fields = json.loads(args.model_fields)
    model = presets.get_preset(args.preset, attention_impl=args.attention_impl, **fields)
    b, t = args.batch, args.seq_len
    step, state, batch, mesh = train_throughput.sft_step(model, b, t)
    key = jax.random.key(1)
    with jax.set_mesh(mesh):
        compiled = step.jitted.lower(state, batch, key).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost

    for _ in range(3):  # compile, warm up
        state, m = step(state, batch, key)
        jax.block_until_ready(m)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        state, m = step(state, batch, key)
        jax.block_until_ready(m)
    wall = (time.perf_counter() - t0) / args.steps
    jax.profiler.start_trace(args.trace_dir)
    for _ in range(args.steps):
        state, m = step(state, batch, key)
        jax.block_until_ready(m)
    jax.profiler.stop_trace()

    parts = _breakdown(args.trace_dir, compiled.as_text(), args.steps)
    total = sum(parts.values())
    model_flops = model.flops_per_token(t) * b * t
    print(
        f"{args.preset} SFT step, {b} x {t} tokens, attention "
        f"{args.attention_impl or 'default'}: {wall * 1e3:.0f} ms wall, "
        f"{total:.0f} ms thread time in XLA ops"
    )
    for name, v in parts.items():
        print(f"  {v:8.1f} ms  {100 * v / total:5.1f}%  {name}")
    print(
        f"XLA cost analysis: {cost.get('flops', 0) / 1e9:.1f} GFLOP, "
        f"{cost.get('bytes accessed', 0) / 1e9:.2f} GB accessed; model FLOPs "
        f"{model_flops / 1e9:.1f} GFLOP ({model_flops / wall / 1e9:.1f} GFLOP/s)"
    )
    print(f"trace: {args.trace_dir}")
    result = {
        "preset": args.preset,
        "model_fields": fields,
        "tokens": b * t,
        "attention_impl": args.attention_impl or "default",
        "step_ms": round(wall * 1e3, 1),
        "tokens_per_s": round(b * t / wall),
        "thread_ms": round(total, 1),
        "parts_ms": {k: round(v, 1) for k, v in parts.items()},
        "xla_gflop": round(cost.get("flops", 0) / 1e9, 2),
        "model_gflop": round(model_flops / 1e9, 2),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
