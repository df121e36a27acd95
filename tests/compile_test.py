"""Pod-size compile checks: `.lower()` on abstract meshes, no device memory allocated.

The SFT train step of the Qwen3-8B/14B presets is traced and lowered for TPU
on abstract meshes of 64 and 256 devices with the paper's SFT batch (256
sequences, micro-batched), and the per-device bytes of params + optimizer
state are checked against a budget: 16 GiB, a fraction of one H200 (141 GB)
or TPU v5p (95 GB) chip that leaves room for activations and the KV cache.

The RL step (GRPO loss of `rl.make_loss_fn`) is lowered the same way with the
paper's RL batch (128 prompts x 8 rollouts = 1024 sequences, T = 8192,
micro-batched), and so is the sampler (prefill + `while_loop` decode) on the
same batch with params in the trainer's layout, as the RL stage calls it. Its
KV cache is sized by abstract shapes: params + cache per device must stay
under 32 GiB at the lowered shape, and the cache at the stage-1 response
length (prompt 1024 + 8192 new tokens, computed, not lowered) under 48 GiB,
so that either leaves half of a v5p chip (95 GB) to activations.
"""

import math

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from nemocascade import config as config_lib
from nemocascade.model import presets, transformer
from nemocascade.rollout import sampler, sampling
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib, step as step_lib
from nemocascade.trainer.stages import rl, sft

STATE_BUDGET_BYTES = 16 * 2**30
DECODE_BUDGET_BYTES = 32 * 2**30
FULL_CACHE_BUDGET_BYTES = 48 * 2**30
RL_SEQS, RL_SEQ_LEN, RL_MICRO = 128 * 8, 8192, 16
PROMPT_BUCKET, DECODE_NEW_TOKENS, STAGE1_NEW_TOKENS = 1024, 16, 8192
MESHES = pytest.mark.parametrize("mesh_shape", [(1, 16, 4), (1, 64, 4)], ids=["64dev", "256dev"])
PRESETS = pytest.mark.parametrize("preset", ["qwen3_8b", "qwen3_14b"])
BATCH_KEYS = ("inputs", "targets", "loss_mask", "positions", "segment_ids")


def per_device_bytes(abstract_tree) -> int:
    total = 0
    for leaf in jax.tree.leaves(abstract_tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total


def lower_sft_step(preset: str, mesh_shape, batch: int, seq_len: int, micro: int):
    model = presets.get_preset(preset)
    cfg = config_lib.Config(stage="sft", model=model)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    rules = rules_lib.get_rules("fsdp_tp")
    tx = optimizer.make(cfg.optim, 1000)
    abstract, shardings = state_lib.abstract_state(model, tx, mesh, rules)
    bs = rules_lib.batch_sharding(mesh, rules, 2)
    batch_spec = {
        k: jax.ShapeDtypeStruct((batch, seq_len), jnp.int32, sharding=bs) for k in BATCH_KEYS
    }
    step = step_lib.make_train_step(
        sft.make_loss_fn(cfg),
        tx,
        num_microbatches=micro,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
    )
    rng = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    with jax.sharding.use_abstract_mesh(mesh):
        traced = step.jitted.trace(abstract, batch_spec, rng)
        lowered = traced.lower(lowering_platforms=("tpu",))
    return lowered, abstract


@pytest.mark.parametrize("preset", ["qwen3_8b", "qwen3_14b"])
@pytest.mark.parametrize("mesh_shape", [(1, 16, 4), (1, 64, 4)], ids=["64dev", "256dev"])
def test_sft_step_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, abstract = lower_sft_step(preset, mesh_shape, batch=256, seq_len=4096, micro=16)
    text = lowered.as_text()
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in text
    state_bytes = per_device_bytes(abstract)
    print(f"{preset} on {math.prod(mesh_shape)} devices: {state_bytes / 2**30:.2f} GiB/device")
    assert 0 < state_bytes < STATE_BUDGET_BYTES
    # Parameters really are sharded: per-device bytes well below a replica.
    replica = presets.get_preset(preset).num_params * 4 * 3  # f32 params + Adam mu, nu
    assert state_bytes < replica / (math.prod(mesh_shape) / 2)


def _sharded(shape, dtype, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def lower_rl_step(preset: str, mesh_shape):
    model = presets.get_preset(preset)
    cfg = config_lib.Config(stage="stage1_short", model=model)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    rules = rules_lib.get_rules("fsdp_tp")
    tx = optimizer.make(cfg.optim, 1000)
    abstract, shardings = state_lib.abstract_state(model, tx, mesh, rules)
    bs2, bs1 = rules_lib.batch_sharding(mesh, rules, 2), rules_lib.batch_sharding(mesh, rules, 1)
    shape = (RL_SEQS, RL_SEQ_LEN)
    batch_spec = {k: _sharded(shape, jnp.int32, bs2) for k in BATCH_KEYS}
    batch_spec["sampler_logprobs"] = _sharded(shape, jnp.float32, bs2)
    batch_spec["advantages"] = _sharded((RL_SEQS,), jnp.float32, bs1)
    step = step_lib.make_train_step(
        rl.make_loss_fn(cfg, temperature=0.6),
        tx,
        num_microbatches=RL_MICRO,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
    )
    rng = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = step.jitted.trace(abstract, batch_spec, rng).lower(lowering_platforms=("tpu",))
    return lowered, abstract


@PRESETS
@MESHES
def test_rl_step_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, abstract = lower_rl_step(preset, mesh_shape)
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in lowered.as_text()
    state_bytes = per_device_bytes(abstract)
    print(f"RL {preset} on {math.prod(mesh_shape)} devices: {state_bytes / 2**30:.2f} GiB/device")
    assert 0 < state_bytes < STATE_BUDGET_BYTES


def abstract_cache(model, batch: int, length: int, mesh, rules):
    shapes = jax.eval_shape(lambda: transformer.init_cache(model, batch, length))
    return {
        k: _sharded(a.shape, a.dtype, NamedSharding(mesh, rules_lib.spec(names, rules)))
        for k, names in transformer.CACHE_LOGICAL_AXES.items()
        for a in [shapes[k]]
    }


def lower_sampler(preset: str, mesh_shape):
    """`sampler._decode_jit` as `sampler.generate` calls it, on abstract arrays."""
    model = presets.get_preset(preset)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    decode_rules = rules_lib.get_rules("decode")
    # The RL stage samples with the trainer's params in place (no weight transfer).
    tx = optimizer.make(config_lib.Config(stage="stage1_short", model=model).optim, 1000)
    params = state_lib.abstract_state(model, tx, mesh, rules_lib.get_rules("fsdp_tp"))[0].params
    b, p = RL_SEQS, PROMPT_BUCKET
    cache = abstract_cache(model, b, p + DECODE_NEW_TOKENS, mesh, decode_rules)
    rows, row = (
        rules_lib.batch_sharding(mesh, decode_rules, 2),
        rules_lib.batch_sharding(mesh, decode_rules, 1),
    )
    # (prompt, pad, live, thinking budget, answer budget): `sampler._HOST_ARGS`.
    host = (
        _sharded((b, p), jnp.int32, rows),
        _sharded((b,), jnp.int32, row),
        _sharded((b,), jnp.bool_, row),
        _sharded((b,), jnp.int32, row),
        _sharded((b,), jnp.int32, row),
    )
    rep = NamedSharding(mesh, PartitionSpec())
    ids = {
        "stop": _sharded((sampler.MAX_STOP_IDS,), jnp.int32, rep),
        "close": _sharded((sampler.MAX_THINK_CLOSE_IDS,), jnp.int32, rep),
        "num_close": _sharded((), jnp.int32, rep),
        "end": _sharded((), jnp.int32, rep),
    }
    static = sampler._Static(
        model_cfg=model,
        method=sampling.Sample(temperature=0.6, top_k=20, top_p=0.95),
        max_new_tokens=DECODE_NEW_TOKENS,
        pad_id=0,
        rules=decode_rules,
    )
    rng = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    with jax.sharding.use_abstract_mesh(mesh):
        traced = sampler._decode_jit.trace(params, cache, *host, ids, rng, static=static)
        lowered = traced.lower(lowering_platforms=("tpu",))
    return lowered, params, cache


@PRESETS
@MESHES
def test_sampler_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, params, cache = lower_sampler(preset, mesh_shape)
    text = lowered.as_text()
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in text
    assert "stablehlo.while" in text
    param_bytes, cache_bytes = per_device_bytes(params), per_device_bytes(cache)
    model = presets.get_preset(preset)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    full = abstract_cache(
        model, RL_SEQS, PROMPT_BUCKET + STAGE1_NEW_TOKENS, mesh, rules_lib.get_rules("decode")
    )
    full_bytes = per_device_bytes(full)
    print(
        f"sampler {preset} on {math.prod(mesh_shape)} devices: params "
        f"{param_bytes / 2**30:.2f} GiB + KV cache {cache_bytes / 2**30:.2f} GiB/device "
        f"(cache at {PROMPT_BUCKET}+{STAGE1_NEW_TOKENS} slots: {full_bytes / 2**30:.2f} GiB)"
    )
    assert 0 < param_bytes + cache_bytes < DECODE_BUDGET_BYTES
    assert full_bytes < FULL_CACHE_BUDGET_BYTES
    # The cache is sharded over batch and kv heads, not replicated.
    dp, tp = mesh_shape[0] * mesh_shape[1], mesh_shape[2]
    assert per_device_bytes({"k": full["k"]}) * dp * tp == math.prod(full["k"].shape) * 2
