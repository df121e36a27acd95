"""The training forward's log-prob on a multi-device mesh: the shard_map form of
the fused kernel (tokens over the batch axes, vocabulary over `tensor` under
`fsdp_tp`, tokens only under `fsdp`) equals the single-device call, values and
gradients, for every fused implementation."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import forward
from tests.rollout import helpers

CFG = dataclasses.replace(helpers.TOY_MODEL, max_seq_len=32)  # vocab 64, untied head


def _batch(b=4, t=32, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, CFG.vocab_size, size=(b, t)).astype(np.int32)
    seg = np.ones((b, t), np.int32)
    seg[0, 24:] = 0
    return {
        "inputs": tokens,
        "targets": np.roll(tokens, -1, axis=1),
        "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
        "segment_ids": seg,
    }


def _loss(impl):
    def loss(params, batch):
        logp, ent = forward.sequence_logprobs(
            params, CFG, batch, implementation=impl, compute_entropy=True
        )
        w = batch["segment_ids"].astype(jnp.float32)
        return jnp.sum((logp + 0.1 * ent) * w), logp

    return jax.value_and_grad(loss, has_aux=True)


@pytest.mark.parametrize("rules_name", ["fsdp_tp", "fsdp"])
@pytest.mark.parametrize("impl", ["chunked_xla", "pallas_tpu", "pallas_gpu"])
def test_sharded_forward_logprobs_equal_single_device(impl, rules_name):
    params = helpers.random_params(CFG)
    batch = _batch()
    (ref_loss, ref_logp), ref_grads = jax.jit(_loss(impl))(params, batch)
    mesh = mesh_lib.make_mesh((1, 4, 2))
    rules = rules_lib.get_rules(rules_name)

    def step(params, batch):
        with nn.logical_axis_rules(rules):
            return _loss(impl)(params, batch)

    with jax.set_mesh(mesh):
        batch = jax.device_put(batch, rules_lib.batch_sharding(mesh, rules, 2))
        jaxpr = jax.jit(step).trace(params, batch).jaxpr.pretty_print()
        (loss, logp), grads = jax.jit(step)(params, batch)
    assert "shard_map" in jaxpr and "psum" in jaxpr
    assert ("pmax" in jaxpr) == (rules_name == "fsdp_tp")  # vocabulary shards combined
    np.testing.assert_allclose(logp, ref_logp, atol=2e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-5)
    for g, rg in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, rg, atol=2e-5 * max(1.0, float(np.abs(rg).max())))
