"""Shared pieces of the config files: size variants and section defaults.

Config files import only `ml_collections` and this module; this module takes
every field's default from `nemocascade.config` (the one place that defines
them), so every field is overridable from the command line. Every config takes
`:tiny` (CPU, built-in task world), `:small` (CPU benchmark size), `:8b` and
`:14b` (Qwen3 shapes on pod meshes).
"""

import ml_collections

from nemocascade import config as config_lib

SIZES = ("tiny", "small", "8b", "14b")


def parse_arg(arg: str | None, default: str = "tiny") -> str:
    size = arg or default
    if size not in SIZES:
        raise ValueError(f"unknown config variant {size!r}; choose from {SIZES}")
    return size


def base(stage: str, size: str) -> ml_collections.ConfigDict:
    """Sections every stage has, sized for `size`."""
    preset = {"tiny": "tiny", "small": "small", "8b": "qwen3_8b", "14b": "qwen3_14b"}[size]
    c = ml_collections.ConfigDict(config_lib.defaults(stage, preset))
    c.mesh.rules = "fsdp" if size in ("tiny", "small") else "fsdp_tp_sp"
    if size in ("8b", "14b"):
        # Tensor (and sequence) parallelism over 8 chips, FSDP over the rest:
        # what fits the papers' 32K-48K-token steps on 16 GiB chips
        # (tests/compile_test.py, docs/kernels.md).
        c.mesh.shape = (1, -1, 8)
        # A real model trains on real data only (docs/data.md): no silent toy run.
        c.data.task_world = False
    return c


def rl_base(stage: str, size: str) -> ml_collections.ConfigDict:
    """Defaults shared by every RL stage (paper §2: GRPO, on-policy, no KL, token mean)."""
    c = base(stage, size)
    if size in ("tiny", "small"):
        # Tiny world: Adam moves every weight by ~lr per step whatever the
        # signal, and the SFT policy is nearly deterministic on math (entropy
        # ~0.03 nats/token): at lr 1e-4 one step took math RL's sampled
        # reward from 0.55 to 0.17; 2e-5 with 16 prompts x 8 rollouts at
        # temperature 0.6 was stable and rose slowly.
        c.rl.update(prompts_per_step=16, group_size=8, temperature=0.6, eval_num=128)
        c.optim.update(
            lr=2e-5,
            warmup_steps=0,
            schedule="constant",
            b1=0.9,
            b2=0.95,
            weight_decay=0.0,
            grad_clip=1.0,
        )
        # 16 rows per micro-batch: XLA:CPU runs a 128-row step ~20% faster as
        # 8 micro-batches (activations stay in cache; docs/benchmarks.md).
        c.train.update(
            steps=24,
            batch_size=128,
            num_microbatches=8,
            seq_len=512,
            log_every=1,
            eval_every=12,
            checkpoint_every=12,
        )
        c.eval.update(num_per_domain=64, max_new_tokens=192, thinking_budget=160, batch_size=128)
    else:
        # Paper: batch 128 prompts x 8 rollouts, AdamW beta=(0.9, 0.95), lr 2e-6..4e-6.
        c.rl.update(prompts_per_step=128, group_size=8, eval_num=512)
        c.optim.update(
            lr=2e-6,
            warmup_steps=0,
            schedule="constant",
            b1=0.9,
            b2=0.95,
            weight_decay=0.0,
            grad_clip=1.0,
        )
        c.train.update(
            steps=500,
            batch_size=1024,
            seq_len=40_960,
            num_microbatches=64,
            log_every=1,
            eval_every=50,
            checkpoint_every=10,
        )
        c.eval.update(
            num_per_domain=512, max_new_tokens=32_768, thinking_budget=30_000, batch_size=512
        )
    return c
