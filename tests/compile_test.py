"""Pod-size compile checks: `.lower()` on abstract meshes, no device memory allocated.

The SFT train step of the Qwen3-8B/14B presets is traced and lowered for TPU
on abstract meshes of 64 and 256 devices with the paper's SFT batch (256
sequences, micro-batched), and the per-device bytes of params + optimizer
state are checked against a budget: 16 GiB, a fraction of one H200 (141 GB)
or TPU v5p (95 GB) chip that leaves room for activations and the KV cache.
"""

import math

import jax
import jax.numpy as jnp
import pytest

from nemocascade import config as config_lib
from nemocascade.model import presets
from nemocascade.sharding import mesh as mesh_lib
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import optimizer
from nemocascade.trainer import state as state_lib
from nemocascade.trainer import step as step_lib
from nemocascade.trainer.stages import sft

STATE_BUDGET_BYTES = 16 * 2**30
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
