"""Benchmark: greedy decode of one random Qwen3 model in our sampler vs `transformers.generate`.

    python bench/hf_decode.py                           # ~10M params, batch 16, 128 new tokens
    python bench/hf_decode.py --layers 2 --new-tokens 32 --repeats 1   # quick

A random `transformers` Qwen3 model is saved, imported with
`nemocascade.model.hf_convert`, and both sides decode the same batch of
random prompts greedily with no stop token (the end-of-sequence id lies
outside the vocabulary), in float32 on the CPU. Reported: the best of
`--repeats` timed calls (after one warm-up call, which for our sampler
includes the compile), generated tokens per second, the ratio, and how many
rows decode identically. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import jax
import numpy as np
import torch
import transformers

from nemocascade.model import hf_convert
from nemocascade.rollout import decoding, sampling_methods


def _parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--ffw", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="timed calls after the warm-up")
    p.add_argument("--torch-threads", type=int, default=os.cpu_count())
    return p.parse_args(argv)


def _best_of(fn, repeats: int) -> tuple[float, float, object]:
    """(first call seconds, best later call seconds, last result)."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return first, best, out


def main(argv=None) -> None:
    args = _parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(args.torch_threads)
    config = transformers.Qwen3Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.ffw,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        tie_word_embeddings=True,
        initializer_range=0.1,
    )
    model = transformers.Qwen3ForCausalLM(config).eval()
    prompts = np.random.RandomState(0).randint(0, args.vocab, (args.batch, args.prompt_len))
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        cfg = hf_convert.config_from_hf(d, max_seq_len=args.prompt_len + args.new_tokens)
        params = hf_convert.import_params(d, cfg)
    print(
        f"Qwen3 {cfg.num_params / 1e6:.1f}M params, batch {args.batch}, prompt "
        f"{args.prompt_len}, {args.new_tokens} new tokens, float32, {jax.devices()[0].platform}"
    )

    def ours():
        rollout = decoding.generate(
            params,
            cfg,
            prompts.tolist(),
            method=sampling_methods.Greedy(),
            max_new_tokens=args.new_tokens,
            stop_ids=[args.vocab],
            rng=jax.random.key(0),
        )
        return rollout.completion_tokens

    def theirs():
        with torch.no_grad():
            out = model.generate(
                torch.tensor(prompts),
                attention_mask=torch.ones(prompts.shape, dtype=torch.long),
                do_sample=False,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                eos_token_id=args.vocab,
                pad_token_id=0,
            )
        return out[:, args.prompt_len :].numpy()

    generated = args.batch * args.new_tokens
    results = {}
    for name, fn in (("nemocascade", ours), ("transformers", theirs)):
        first, best, tokens = _best_of(fn, args.repeats)
        results[name] = {"first_s": first, "best_s": best, "tok_s": generated / best}
        results[name]["tokens"] = tokens
        print(
            f"  {name:13s} {generated / best:9.0f} tok/s  best {best:6.2f} s  "
            f"(first call {first:.2f} s)",
            flush=True,
        )
    same = int(
        (results["nemocascade"]["tokens"] == results["transformers"]["tokens"]).all(-1).sum()
    )
    ratio = results["nemocascade"]["tok_s"] / results["transformers"]["tok_s"]
    print(f"  ratio nemocascade / transformers: {ratio:.2f}x; identical rows {same}/{args.batch}")
    print(
        json.dumps(
            {
                "bench": "hf_decode",
                "params_m": round(cfg.num_params / 1e6, 2),
                "batch": args.batch,
                "prompt_len": args.prompt_len,
                "new_tokens": args.new_tokens,
                "nemocascade_tok_s": round(results["nemocascade"]["tok_s"], 1),
                "transformers_tok_s": round(results["transformers"]["tok_s"], 1),
                "ratio": round(ratio, 3),
                "nemocascade_first_call_s": round(results["nemocascade"]["first_s"], 2),
                "identical_rows": same,
                "torch_threads": args.torch_threads,
            }
        )
    )


if __name__ == "__main__":
    main()
