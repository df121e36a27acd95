"""Decode throughput: the KV-cache sampler against a naive full-recompute decode.

    python bench/decode_throughput.py [--presets=tiny,small] [--batch=64] [--new_tokens=256]

For each preset (random params, greedy, no stop token, so every row decodes
all `new_tokens`): (1) `decoding.generate` end to end (prefill + while_loop
decode + host transfer), timed after a compile run; (2) a naive decode that
re-runs the full forward over the whole padded `[B, P + new_tokens]` buffer
at every step and takes the logits of the current slot, jitted, same left
padding. The naive step has a fixed shape, so its cost does not depend on the
step: it is timed over `--naive_steps` steps (compiled ahead) and scaled to
`new_tokens`. Prints generated tokens/s of both and their ratio, and ends
with one JSON line of headline figures.
"""

from __future__ import annotations

import argparse
import json
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.model import presets, transformer
from nemocascade.rollout import decoding, sampling_methods


def random_params(cfg: presets.ModelConfig, seed: int = 0):
    """N(0, 0.02) weights and unit norm scales, drawn on the host (no init compile)."""
    shapes = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if "scale" in jax.tree_util.keystr(path):
            return jnp.ones(leaf.shape, leaf.dtype)
        return jnp.asarray(rng.normal(0.0, 0.02, leaf.shape).astype(leaf.dtype))

    return jax.tree_util.tree_map_with_path(draw, shapes)


def naive_decode_fn(cfg: presets.ModelConfig, prompt_len: int, steps: int):
    """Jitted `steps` greedy steps, each a full forward over the fixed-size buffer."""
    model = transformer.Transformer(cfg)

    @jax.jit
    def run(params, buf_bt, pad_b, start):
        t = buf_bt.shape[1]
        slots = jnp.arange(t, dtype=jnp.int32)[None]
        segments = (slots >= pad_b[:, None]).astype(jnp.int32)
        positions = jnp.maximum(slots - pad_b[:, None], 0)
        w_dv = transformer.unembedding(params, cfg)

        def step(i, buf):
            hidden_btd, _ = model.apply({"params": params}, buf, positions, segments)
            cur = prompt_len - 1 + start + i
            h_bd = jax.lax.dynamic_index_in_dim(hidden_btd, cur, axis=1, keepdims=False)
            logits_bv = jnp.einsum("bd,dv->bv", h_bd, w_dv, preferred_element_type=jnp.float32)
            tok_b = jnp.argmax(logits_bv, axis=-1).astype(buf.dtype)
            return jax.lax.dynamic_update_slice_in_dim(buf, tok_b[:, None], cur + 1, axis=1)

        return jax.lax.fori_loop(0, steps, step, buf_bt)

    return run


def bench_preset(name: str, batch: int, new_tokens: int, prompt_len: int, naive_steps: int):
    cfg = presets.get_preset(name)
    params = random_params(cfg)
    rng = np.random.default_rng(1)
    prompts = [
        rng.integers(
            1, cfg.vocab_size, size=int(rng.integers(prompt_len // 2, prompt_len + 1))
        ).tolist()
        for _ in range(batch)
    ]

    def cached():
        return decoding.generate(
            params,
            cfg,
            prompts,
            method=sampling_methods.Greedy(),
            max_new_tokens=new_tokens,
            stop_ids=(),
            rng=jax.random.key(0),
        )

    t = time.perf_counter()
    out = cached()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    out = cached()
    cached_s = time.perf_counter() - t
    assert int(out.lengths.sum()) == batch * new_tokens

    # The naive decode sees exactly the sampler's padded layout.
    p = out.prompt_tokens.shape[1]
    buf = np.zeros((batch, p + new_tokens), np.int32)
    buf[:, :p] = out.prompt_tokens
    pad = (p - out.prompt_lengths).astype(np.int32)
    naive = naive_decode_fn(cfg, p, naive_steps).lower(params, buf, pad, 0).compile()
    t = time.perf_counter()
    naive_buf = jax.block_until_ready(naive(params, buf, pad, 0))
    naive_step_s = (time.perf_counter() - t) / naive_steps
    agree = float(
        (
            np.asarray(naive_buf)[:, p : p + naive_steps] == out.completion_tokens[:, :naive_steps]
        ).mean()
    )

    cached_tps = batch * new_tokens / cached_s
    naive_tps = batch / naive_step_s
    return {
        "preset": name,
        "params_m": round(cfg.num_params / 1e6, 2),
        "batch": batch,
        "new_tokens": new_tokens,
        "prompt_bucket": p,
        "cached_tok_s": round(cached_tps, 1),
        "cached_s": round(cached_s, 3),
        "first_call_overhead_s": round(compile_s - cached_s, 2),  # mostly compile
        "naive_tok_s": round(naive_tps, 1),
        "naive_step_ms": round(naive_step_s * 1e3, 1),
        "speedup": round(cached_tps / naive_tps, 1),
        "first_steps_agree": agree,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--prompt_len", type=int, default=16)
    parser.add_argument("--naive_steps", type=int, default=4)
    args = parser.parse_args()
    print(f"backend={jax.default_backend()} devices={jax.device_count()}")
    rows = []
    for name in args.presets.split(","):
        r = bench_preset(name, args.batch, args.new_tokens, args.prompt_len, args.naive_steps)
        rows.append(r)
        print(
            f"{name:6s} ({r['params_m']}M params) batch {r['batch']} x {r['new_tokens']} new: "
            f"KV-cache {r['cached_tok_s']:9.1f} tok/s ({r['cached_s']:.2f} s) | "
            f"naive {r['naive_tok_s']:8.1f} tok/s ({r['naive_step_ms']:.0f} ms/step) | "
            f"speedup {r['speedup']:.1f}x (goal >= 5x)"
        )
    print(
        json.dumps({"bench": "decode_throughput", "backend": jax.default_backend(), "rows": rows})
    )


if __name__ == "__main__":
    main()
