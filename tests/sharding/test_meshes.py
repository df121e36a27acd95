"""Sharded == unsharded across mesh layouts, for the SFT step, the RL step and the decoding."""

import dataclasses

import chex
import flax.linen as nn
import jax
import numpy as np
import pytest

from nemocascade import config as config_lib
from nemocascade.model import transformer
from nemocascade.rollout import decoding, sampling_methods
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib, step as step_lib
from nemocascade.trainer.stages import rl, sft
from tests.trainer import helpers

MESHES = [((1, 1, 1), "fsdp"), ((8, 1, 1), "fsdp"), ((1, 8, 1), "fsdp"), ((2, 2, 2), "fsdp_tp")]
# The train steps also run with sequence parallelism (the residual stream's length over 'tensor').
STEP_MESHES = MESHES + [((2, 2, 2), "fsdp_tp_sp")]


def _rl_batch(seed: int) -> dict:
    b = helpers.batch(seed)
    rng = np.random.default_rng(seed)
    b["advantages"] = rng.normal(size=(8,)).astype(np.float32)
    b["sampler_logprobs"] = np.zeros((8, 16), np.float32)
    return b


def _train(cfg, loss_fn, mesh_shape, rules_name, batches):
    devices = jax.devices()[: int(np.prod(mesh_shape))]
    mesh = mesh_lib.make_mesh(mesh_shape, devices=devices)
    rules = rules_lib.get_rules(rules_name)
    tx = optimizer.make(cfg.optim, 10)
    _, shardings = state_lib.abstract_state(cfg.model, tx, mesh, rules)
    state = state_lib.create(cfg.model, tx, mesh, rules, jax.random.key(0))
    step = step_lib.make_train_step(
        loss_fn, tx, num_microbatches=1, mesh=mesh, rules=rules, state_shardings=shardings
    )
    losses = []
    for b in batches:
        state, m = step(state, rules_lib.put_batch(b, mesh, rules), jax.random.key(1))
        losses.append(float(m["loss"]))
    return losses, jax.device_get(state.params)


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_step_identical_across_meshes(kind):
    cfg = helpers.toy_config()
    if kind == "sft":
        loss_fn, batches = sft.make_loss_fn(cfg), [helpers.batch(i) for i in range(2)]
    else:
        loss_fn, batches = rl.make_loss_fn(cfg, temperature=1.0), [_rl_batch(i) for i in range(2)]
    results = [_train(cfg, loss_fn, shape, r, batches) for shape, r in STEP_MESHES]
    base_losses, base_params = results[0]
    for (shape, _), (losses, params) in zip(STEP_MESHES[1:], results[1:], strict=True):
        # Reduction order differs across shards: losses to 1e-5 relative, params
        # (after Adam, which rescales tiny gradients) to 5e-5 absolute.
        np.testing.assert_allclose(losses, base_losses, rtol=1e-5, err_msg=str(shape))
        # Adam's per-entry scaling: 2% of one lr-sized step (see tests/trainer/test_step.py).
        chex.assert_trees_all_close(params, base_params, atol=2e-4, rtol=1e-4)


def test_greedy_sampler_identical_across_meshes():
    cfg = dataclasses.replace(helpers.TOY_MODEL, vocab_size=64)
    params = nn.meta.unbox(transformer.init_params(cfg, jax.random.key(3)))
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [3], [20, 21]] * 2
    outs = []
    for shape, _ in MESHES:
        devices = jax.devices()[: int(np.prod(shape))]
        mesh = mesh_lib.make_mesh(shape, devices=devices)
        r = decoding.generate(
            params,
            cfg,
            prompts,
            method=sampling_methods.Greedy(),
            max_new_tokens=12,
            stop_ids=(1,),
            rng=jax.random.key(0),
            mesh=mesh,
            rules=rules_lib.get_rules("decode"),
        )
        outs.append(np.asarray(r.completion_tokens))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_config_rejects_mesh_that_does_not_divide_devices():
    cfg = dataclasses.replace(helpers.toy_config(), mesh=config_lib.MeshConfig(shape=(3, -1, 1)))
    with pytest.raises(config_lib.ConfigError, match="mesh.shape"):
        config_lib.check_devices(cfg, 8)


def test_batch_shards_count_the_data_axes_only():
    mesh = mesh_lib.make_mesh((2, 2, 2))
    rules = rules_lib.get_rules("fsdp_tp")
    assert rules_lib.batch_shards(mesh, rules) == 4
    # What the RL stage used to count: every device, the tensor axis included.
    assert rules_lib.batch_sharding(mesh, rules).num_devices == 8
    placed = rules_lib.put_batch({"x": np.zeros((4, 3), np.int32)}, mesh, rules)
    assert placed["x"].sharding.shard_shape((4, 3)) == (1, 3)
    assert rules_lib.batch_shards(mesh_lib.make_mesh((1, 4, 2)), rules) == 4
    assert rules_lib.batch_shards(mesh_lib.make_mesh((2, 4, 1)), rules_lib.get_rules("fsdp")) == 8
