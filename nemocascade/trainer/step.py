"""The pure, jitted-once train step with exact micro-batched gradient accumulation.

A loss function returns sums — `(numerator, (denominator, metrics))` — for a
micro-batch. The step adds numerators' gradients and denominators over all
micro-batches and divides once, so the update equals the full-batch update
of `Σ numerator / Σ denominator` (the token-mean over the global batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import state as state_lib

Batch = dict[str, jax.Array]
# metrics: name -> (sum, count); reported as sum / count over the global batch.
Metrics = dict[str, tuple[jax.Array, jax.Array]]
LossFn = Callable[[Any, Batch, jax.Array], tuple[jax.Array, tuple[jax.Array, Metrics]]]


def split_microbatches(batch: Batch, num: int) -> Batch:
    """[B, ...] → [num, B/num, ...], micro-batch m taking examples m, m+num, ….

    Strided assignment keeps every device's contiguous shard of the batch
    spread evenly over all micro-batches, so no examples move between devices.
    """

    def split(x):
        b = x.shape[0]
        return jnp.swapaxes(x.reshape(b // num, num, *x.shape[1:]), 0, 1)

    return jax.tree.map(split, batch)


def accumulate(loss_fn: LossFn, params, batch: Batch, rng, num_microbatches: int):
    """(loss, grads, metrics) of Σnum/Σden over micro-batches, in float32."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if num_microbatches == 1:
        (num, (den, metrics)), grads = grad_fn(params, batch, rng)
    else:
        micro = split_microbatches(batch, num_microbatches)

        def body(carry, xs):
            i, mb = xs
            (n, (d, m)), g = grad_fn(params, mb, jax.random.fold_in(rng, i))
            acc_g, acc_n, acc_d, acc_m = carry
            acc_g = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), acc_g, g)
            acc_m = jax.tree.map(jnp.add, acc_m, m)
            return (acc_g, acc_n + n, acc_d + d, acc_m), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        first = jax.tree.map(lambda x: x[0], micro)
        m_shape = jax.eval_shape(lambda: loss_fn(params, first, rng)[1][1])
        m_zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), m_shape)
        init = (zeros, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), m_zeros)
        idx = jnp.arange(num_microbatches)
        (grads, num, den, metrics), _ = jax.lax.scan(body, init, (idx, micro))
    scale = 1.0 / jnp.maximum(den, 1.0)
    grads = jax.tree.map(lambda g, p: (g * scale).astype(p.dtype), grads, params)
    return num * scale, grads, metrics, den


def make_train_step(
    loss_fn: LossFn,
    tx: optax.GradientTransformation,
    *,
    num_microbatches: int,
    mesh,
    rules: rules_lib.Rules,
    state_shardings,
    updates_per_batch: int = 1,
):
    """Returns `step(state, batch, rng) -> (state, metrics)`, jitted once, state donated.

    With `updates_per_batch` U > 1 the batch is split into U mini-batches
    (strided, as micro-batches are) and the step applies U optimizer updates
    in sequence, mini-batch k's loss taken at the params update k-1 left: PPO
    epochs over one rollout batch, where the importance ratio departs from 1.
    `state.step` still counts batches (the optimizer's own count, and so its
    learning-rate schedule, counts updates). Metrics are over all U
    mini-batches; `loss` and `grad_norm` are their means.
    """
    if updates_per_batch < 1:
        raise ValueError(f"updates_per_batch must be >= 1, got {updates_per_batch}")

    def update(params, opt_state, batch, rng):
        loss, grads, metrics, den = accumulate(loss_fn, params, batch, rng, num_microbatches)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, (loss, optax.tree.norm(grads), metrics, den)

    def updates(state: state_lib.TrainState, batch: Batch, rng):
        if updates_per_batch == 1:
            return update(state.params, state.opt_state, batch, rng)
        rows = jax.tree.leaves(batch)[0].shape[0]
        if rows % (updates_per_batch * num_microbatches):
            raise ValueError(
                f"a batch of {rows} rows does not split into updates_per_batch="
                f"{updates_per_batch} mini-batches of num_microbatches={num_microbatches}"
            )

        def body(carry, xs):
            i, mini = xs
            params, opt_state, out = update(*carry, mini, jax.random.fold_in(rng, i))
            return (params, opt_state), out

        idx = jnp.arange(updates_per_batch)
        mini = split_microbatches(batch, updates_per_batch)
        (params, opt_state), (loss, gnorm, metrics, den) = jax.lax.scan(
            body, (state.params, state.opt_state), (idx, mini)
        )
        sums = jax.tree.map(lambda x: jnp.sum(x, axis=0), metrics)
        return params, opt_state, (jnp.mean(loss), jnp.mean(gnorm), sums, jnp.sum(den))

    def step(state: state_lib.TrainState, batch: Batch, rng):
        with nn.logical_axis_rules(rules):
            rng = jax.random.fold_in(rng, state.step)
            params, opt_state, (loss, grad_norm, metrics, den) = updates(state, batch, rng)
        out = {k: s / jnp.maximum(c, 1e-9) for k, (s, c) in metrics.items()}
        out.update(
            loss=loss,
            grad_norm=grad_norm,
            param_norm=optax.tree.norm(params),
            loss_tokens=den,
        )
        new_state = state_lib.TrainState(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, out

    jitted = jax.jit(
        step,
        in_shardings=(state_shardings, None, None),
        out_shardings=(state_shardings, None),
        donate_argnums=(0,),
    )

    def run(state, batch, rng):
        with jax.set_mesh(mesh):
            return jitted(state, batch, rng)

    run.jitted = jitted
    return run
