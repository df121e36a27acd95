"""`updates_per_batch`: PPO epochs over one batch in the train step.

U = 1 is the plain step (one update of the whole batch); U = 4 applies four
updates on strided mini-batches in sequence, and its clip fractions are
exactly those the policy loss defines, recomputed here update by update.
"""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

from nemocascade.losses import policy
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import forward, optimizer, state as state_lib, step as step_lib
from tests.trainer import helpers

pytestmark = pytest.mark.slow  # compiles the step at U = 1 and U = 4 and the replays

CLIP_LOW, CLIP_HIGH, DUAL = 0.01, 0.01, 1.1
ROWS, UPDATES = 16, 4


@pytest.fixture(scope="module")
def setup():
    cfg = helpers.toy_config()
    mesh = mesh_lib.make_mesh((1, 1, 1), devices=jax.devices()[:1])
    rules = rules_lib.get_rules("fsdp")
    tx = optimizer.make(cfg.optim, cfg.train.steps)
    _, shardings = state_lib.abstract_state(cfg.model, tx, mesh, rules)
    batch = helpers.batch(0, b=ROWS)
    batch["advantages"] = np.random.default_rng(1).normal(size=ROWS).astype(np.float32)
    state = state_lib.create(cfg.model, tx, mesh, rules, jax.random.key(0))
    batch["old_logprobs"] = np.asarray(_logprobs(cfg, mesh, rules, state.params, batch))
    return cfg, mesh, rules, tx, shardings, batch


def _logprobs(cfg, mesh, rules, params, batch):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        return jax.jit(lambda p, b: forward.sequence_logprobs(p, cfg.model, b)[0])(params, batch)


def _loss_fn(cfg):
    def loss_fn(params, batch, rng):
        del rng
        logp, _ = forward.sequence_logprobs(params, cfg.model, batch)
        num, den, metrics = policy.policy_loss(
            logp,
            batch["old_logprobs"],
            batch["advantages"],
            batch["loss_mask"],
            clip_low=CLIP_LOW,
            clip_high=CLIP_HIGH,
            dual_clip=DUAL,
        )
        return num, (den, metrics)

    return loss_fn


def _step(setup, updates):
    cfg, mesh, rules, tx, shardings, batch = setup
    state = state_lib.create(cfg.model, tx, mesh, rules, jax.random.key(0))
    step = step_lib.make_train_step(
        _loss_fn(cfg),
        tx,
        num_microbatches=1,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
        updates_per_batch=updates,
    )
    state, metrics = step(state, batch, jax.random.key(2))
    return jax.device_get(state), jax.device_get(metrics)


def _manual_update(setup, params, opt_state, mini):
    """One plain optimizer update of `mini`, outside the train step."""
    cfg, mesh, rules, tx, _, _ = setup
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        loss, grads, metrics, _ = jax.jit(
            lambda p, b: step_lib.accumulate(_loss_fn(cfg), p, b, jax.random.key(0), 1)
        )(params, mini)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, float(loss), metrics


def test_one_update_per_batch_is_the_plain_step(setup):
    cfg, mesh, rules, tx, _, batch = setup
    state, metrics = _step(setup, 1)
    start = state_lib.create(cfg.model, tx, mesh, rules, jax.random.key(0))
    params, _, loss, _ = _manual_update(setup, start.params, start.opt_state, batch)
    assert int(state.step) == 1
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
    # On-policy (old log-probs = the current ones): the ratio is 1, nothing clips.
    assert metrics["clip_frac"] == 0 and metrics["dual_clip_frac"] == 0
    np.testing.assert_allclose(metrics["ratio_mean"], 1.0, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), state.params, params)


def test_four_updates_clip_exactly_as_the_loss_defines(setup):
    cfg, mesh, rules, tx, _, batch = setup
    state, metrics = _step(setup, UPDATES)
    assert int(state.step) == 1  # one batch, four optimizer updates
    start = state_lib.create(cfg.model, tx, mesh, rules, jax.random.key(0))
    params, opt_state = start.params, start.opt_state
    clipped = dual = tokens = 0.0
    for k in range(UPDATES):
        mini = {name: v[k::UPDATES] for name, v in batch.items()}  # strided, as the step splits
        logp = np.asarray(_logprobs(cfg, mesh, rules, params, mini))
        ratio = np.exp(logp - mini["old_logprobs"])
        adv = mini["advantages"][:, None]
        valid = mini["loss_mask"] > 0
        # The clipped term is the active one: A > 0 above 1 + ε_high, A < 0 below 1 − ε_low.
        active = ((adv > 0) & (ratio > 1 + CLIP_HIGH)) | ((adv < 0) & (ratio < 1 - CLIP_LOW))
        # Dual clip binds for A < 0 where max(r, clip(r)) > c.
        bound = (adv < 0) & (np.maximum(ratio, np.clip(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH)) > DUAL)
        clipped += (active & valid).sum()
        dual += (bound & valid).sum()
        tokens += valid.sum()
        if k == 0:
            assert (active & valid).sum() == 0  # the first update is still on-policy
        params, opt_state, _, _ = _manual_update(setup, params, opt_state, mini)
    assert clipped > 0
    np.testing.assert_allclose(metrics["clip_frac"], clipped / tokens, rtol=1e-6)
    np.testing.assert_allclose(metrics["dual_clip_frac"], dual / tokens, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), state.params, params)


def test_batch_that_does_not_split_raises(setup):
    cfg, mesh, rules, tx, shardings, batch = setup
    with pytest.raises(ValueError, match="updates_per_batch=3"):
        _step(setup, 3)
    with pytest.raises(ValueError, match="updates_per_batch"):
        step_lib.make_train_step(
            _loss_fn(cfg),
            tx,
            num_microbatches=1,
            mesh=mesh,
            rules=rules,
            state_shardings=shardings,
            updates_per_batch=0,
        )
