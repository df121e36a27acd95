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
):
    """Returns `step(state, batch, rng) -> (state, metrics)`, jitted once, state donated."""

    def step(state: state_lib.TrainState, batch: Batch, rng):
        with nn.logical_axis_rules(rules):
            rng = jax.random.fold_in(rng, state.step)
            loss, grads, metrics, den = accumulate(
                loss_fn, state.params, batch, rng, num_microbatches
            )
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
        out = {k: s / jnp.maximum(c, 1e-9) for k, (s, c) in metrics.items()}
        out.update(
            loss=loss,
            grad_norm=optax.tree.norm(grads),
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
