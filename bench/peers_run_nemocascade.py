"""The nemocascade side of `bench/peers.py` (one subprocess; see that file).

    python bench/peers_run_nemocascade.py prepare SPEC_JSON   # the shared model
    python bench/peers_run_nemocascade.py run SPEC_JSON       # logits, decoding, GRPO

`prepare` draws the model with the project's initializer, writes it as a
finished stage (`export/`, `model_config.json`) and exports it with
`python -m nemocascade.convert --to_hf`, the directory TRL and Tunix load.
`run` measures the project through its public entry points: the sampler
(`rollout.decoding.generate`) and the RL stage (`nemocascade.main` with
`bench/peers_grpo_config.py`), whose `metrics.jsonl` gives per-step
generation (`rollout_s`), reward (`verify_s`) and train (`train_s`) times.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import peers_common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model_cfg(spec):
    from nemocascade.model import presets

    # Layers unrolled, as the project's `tiny` and `small` presets lay out small
    # models (faster on XLA:CPU than one scanned block; same weights either way).
    return presets.ModelConfig(**spec.model, scan_layers=False)


def prepare(spec) -> None:
    import flax.linen as nn
    import jax

    from nemocascade import checkpointing, config as config_lib
    from nemocascade.model import transformer

    cfg = _model_cfg(spec)
    params = nn.meta.unbox(transformer.init_params(cfg, jax.random.key(0)))
    checkpointing.export_params(spec.src_dir, params, {"bench": "peers"})
    with open(os.path.join(spec.src_dir, config_lib.MODEL_CONFIG_FILE), "w") as f:
        json.dump(dataclasses.asdict(cfg), f, indent=2)
    cmd = [sys.executable, "-m", "nemocascade.convert", f"--from={spec.src_dir}"]
    subprocess.run(cmd + [f"--to_hf={spec.hf_dir}"], check=True, cwd=REPO)


def _load_params(spec, cfg):
    import flax.linen as nn
    import jax

    from nemocascade import checkpointing
    from nemocascade.model import transformer

    shapes = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    return checkpointing.load_params(spec.src_dir, shapes)


def logits(params, cfg, ids):
    """Float32 [B, T, V] logits of unpadded rows (the same-weights check)."""
    import jax.numpy as jnp
    import numpy as np

    from nemocascade.model import transformer

    tokens = jnp.asarray(ids, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    hidden, _ = transformer.Transformer(cfg).apply({"params": params}, tokens, positions)
    w_dv = transformer.unembedding(params, cfg)
    return np.asarray(jnp.einsum("btd,dv->btv", hidden, w_dv).astype(jnp.float32))


def decode(spec, params, cfg, prompts, batch: int) -> tuple[dict, object]:
    """Greedy, no stop token (every row decodes all tokens); best of `decode_repeats`."""
    import jax

    from nemocascade.rollout import decoding, sampling_methods

    def call():
        return decoding.generate(
            params,
            cfg,
            prompts[:batch],
            method=sampling_methods.Greedy(),
            max_new_tokens=spec.decode_new_tokens,
            stop_ids=[],
            rng=jax.random.key(0),
        ).completion_tokens

    return peers_common.time_decode(call, spec.decode_repeats, batch * spec.decode_new_tokens)


def grpo(spec) -> dict:
    """The RL stage through `nemocascade.main`; per-step times from its metrics.jsonl."""
    workdir = os.path.join(spec.workdir, "nemocascade", "rl")
    rows = spec.prompts_per_step * spec.group_size
    cmd = [
        sys.executable,
        "-m",
        "nemocascade.main",
        "--config=bench/peers_grpo_config.py",
        f"--workdir={workdir}",
        f"--config.init.init_from={spec.src_dir}",
        f"--config.train.steps={spec.grpo_steps}",
        f"--config.rl.prompts_per_step={spec.prompts_per_step}",
        f"--config.rl.group_size={spec.group_size}",
        f"--config.rl.num_prompts={spec.prompts_per_step * spec.grpo_steps}",
        f"--config.rl.max_new_tokens={spec.grpo_new_tokens}",
        f"--config.rl.temperature={spec.temperature}",
        f"--config.optim.lr={spec.lr}",
        f"--config.train.batch_size={rows}",
        # The project's CPU default of 16 rows per micro-batch (configs/common.py).
        f"--config.train.num_microbatches={max(1, rows // 16)}",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO)
    wall = time.perf_counter() - t0
    rows = []
    with open(os.path.join(workdir, "stage2_medium", "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "rollout_s" not in m:
                continue
            gen, verify, train = m["rollout_s"], m.get("verify_s", 0.0), m["train_s"]
            rows.append(
                {
                    "step": m["step"],
                    "generation_s": gen,
                    "reward_s": verify,
                    "train_s": train,
                    "step_s": gen + verify + train,
                    "tokens": m["response_len_mean"] * spec.prompts_per_step * spec.group_size,
                    "reward_mean": m.get("reward_mean"),
                }
            )
    return {
        "steps": rows,
        "run_wall_s": wall,
        **peers_common.summarize_steps(rows, spec.timed_from),
    }


def run(spec) -> None:
    import jax
    import numpy as np

    cfg = _model_cfg(spec)
    params = _load_params(spec, cfg)
    np.save(
        spec.out("nemocascade", "logits.npy"),
        logits(params, cfg, peers_common.logit_batch(cfg.vocab_size)),
    )
    tok = peers_common.tokenizer()
    prompts = peers_common.prompt_ids(tok, peers_common.math_examples(max(spec.decode_batches)))
    result = {"version": jax.__version__, "decode": {}}
    for b in spec.decode_batches:
        result["decode"][str(b)], tokens = decode(spec, params, cfg, prompts, b)
        np.save(spec.out("nemocascade", f"greedy_{b}.npy"), np.asarray(tokens))
        print(
            f"nemocascade decode batch {b}: {result['decode'][str(b)]['tok_s']:.0f} tok/s",
            flush=True,
        )
    if spec.grpo_steps > 0:
        result["grpo"] = grpo(spec)
    peers_common.write_result(spec, "nemocascade", result)


if __name__ == "__main__":
    what, path = sys.argv[1:3]
    {"prepare": prepare, "run": run}[what](peers_common.Spec.load(path))
