"""GPU check of flash attention and the sharded log-prob kernel (run on a GPU machine).

    python bench/attention_gpu_check.py [--t=4096 --heads=32 --kv-heads=8 --head-dim=128]

1. Attention, bf16, causal + two packed segments per row + GQA: every
   implementation of `kernels/attention/api.py` that runs on a GPU (`xla`
   reference, `chunked_xla`, `dot_product` = cuDNN when JAX picks it,
   `pallas_gpu` = the Pallas Triton flash kernel with interpret off) is
   compiled, compared with the reference (output and q/k/v gradients on the
   non-padding rows, max abs error), timed (forward + backward) and its
   compiled temp memory read.
2. The fused log-prob in its `shard_map` form (`kernels/fused_logprob/sharded.py`)
   on a mesh of all local GPUs (tokens over 'fsdp'), per-shard `pallas_gpu`,
   against the unsharded `chunked_xla` call: log-prob/entropy/gradient error and time.
Ends with one JSON line. Without a GPU it stops with a message.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.kernels.attention import api as attention
from nemocascade.kernels.fused_logprob import api as logprob, sharded
from nemocascade.sharding import mesh as mesh_lib


def _time(fn, args, repeats=5):
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats


def _max_err(a, b):
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


def check_attention(args) -> dict:
    b, t, n, k, h = args.batch, args.t, args.heads, args.kv_heads, args.head_dim
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (b, t, n, h), jnp.bfloat16)
    kk = jax.random.normal(keys[1], (b, t, k, h), jnp.bfloat16)
    v = jax.random.normal(keys[2], (b, t, k, h), jnp.bfloat16)
    g = jax.random.normal(keys[3], (b, t, n, h), jnp.float32)
    seg = jnp.asarray(np.where(np.arange(t) < t // 3, 1, 2)[None].repeat(b, 0), jnp.int32)
    slot = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))

    def step(impl):
        def loss(q, kk, v):
            out = attention.attention(
                q,
                kk,
                v,
                slot,
                seg,
                slot,
                seg,
                implementation=impl,
                self_attention=True,
                interpret=False,
            )
            return jnp.sum(out.astype(jnp.float32) * g), out

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))

    rows, ref = {}, None
    for impl in ("xla", "chunked_xla", "dot_product", "pallas_gpu"):
        try:
            fn = step(impl)
            mem = fn.lower(q, kk, v).compile().memory_analysis()
            (_, out), grads = fn(q, kk, v)
            row = {
                "seconds": round(_time(fn, (q, kk, v)), 5),
                "temp_MiB": round(mem.temp_size_in_bytes / 2**20, 1),
            }
            if ref is None:
                ref = (out, grads)
            else:
                row["out_err"] = _max_err(out, ref[0])
                row["grad_err"] = max(_max_err(a, r) for a, r in zip(grads, ref[1], strict=True))
        except Exception as e:  # report the failure, keep checking the others
            row = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        rows[impl] = row
    return {"shape": {"B": b, "T": t, "N": n, "K": k, "H": h}, **rows}


def check_sharded_logprob(args) -> dict:
    n, d, v = args.tokens, args.d, args.v
    keys = jax.random.split(jax.random.key(1), 4)
    hid = (jax.random.normal(keys[0], (n, d)) * 0.5).astype(jnp.bfloat16)
    w = (jax.random.normal(keys[1], (d, v)) * d**-0.5).astype(jnp.bfloat16)
    y = jax.random.randint(keys[2], (n,), 0, v)
    g = jax.random.normal(keys[3], (n,))
    mesh = mesh_lib.make_mesh((1, -1, 1))

    def loss(fn):
        def f(hid, w):
            lp, ent = fn(hid, w, y)
            return jnp.sum(lp * g + 0.1 * ent), (lp, ent)

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))

    plain = loss(
        lambda h_, w_, y_: logprob.token_logprobs(h_, w_, y_, implementation="chunked_xla")
    )
    mapped = loss(
        lambda h_, w_, y_: sharded.token_logprobs(
            h_,
            w_,
            y_,
            mesh=mesh,
            batch_axes="fsdp",
            vocab_axis="tensor",
            implementation="pallas_gpu",
            interpret=False,
        )
    )
    (_, (lp0, e0)), g0 = plain(hid, w)
    with jax.set_mesh(mesh):
        (_, (lp1, e1)), g1 = mapped(hid, w)
        t1 = _time(mapped, (hid, w))
    return {
        "shape": {"N": n, "D": d, "V": v, "devices": mesh.size},
        "logp_err": _max_err(lp1, lp0),
        "entropy_err": _max_err(e1, e0),
        "grad_err": max(_max_err(a, b) for a, b in zip(g1, g0, strict=True)),
        "sharded_pallas_gpu_seconds": round(t1, 5),
        "chunked_xla_seconds": round(_time(plain, (hid, w)), 5),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--t", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--v", type=int, default=151_936)
    args = p.parse_args()
    if jax.default_backend() != "gpu":
        raise SystemExit(f"needs a GPU; jax.default_backend() is {jax.default_backend()!r}")
    print(
        json.dumps(
            {
                "check": "attention_gpu",
                "devices": [str(d) for d in jax.devices()],
                "attention": check_attention(args),
                "sharded_logprob": check_sharded_logprob(args),
            }
        )
    )


if __name__ == "__main__":
    main()
