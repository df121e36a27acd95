"""Arrays-only train state, created directly in its sharded layout.

`create` follows the eval_shape → logical specs → NamedShardings → jitted init
path, so no replica of the full state ever exists on one device.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from nemocascade.model import presets, transformer
from nemocascade.sharding import rules as rules_lib


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any


def _init_boxed(cfg: presets.ModelConfig, tx: optax.GradientTransformation, rng):
    params = transformer.init_params(cfg, rng)
    # optax sees through the logical-partitioning boxes, so the optimizer
    # state inherits the parameters' logical axes.
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def abstract_state(cfg: presets.ModelConfig, tx, mesh, rules: rules_lib.Rules):
    """(ShapeDtypeStruct tree with shardings, sharding tree) — no allocation."""
    boxed = jax.eval_shape(lambda r: _init_boxed(cfg, tx, r), jax.random.key(0))
    logical = nn.get_partition_spec(boxed)
    shardings = rules_lib.logical_to_sharding(logical, mesh, rules)
    shapes = nn.meta.unbox(boxed)
    abstract = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
    )
    return abstract, shardings


def create(cfg: presets.ModelConfig, tx, mesh, rules: rules_lib.Rules, rng) -> TrainState:
    """A freshly initialized, sharded TrainState."""
    _, shardings = abstract_state(cfg, tx, mesh, rules)
    init = jax.jit(lambda r: nn.meta.unbox(_init_boxed(cfg, tx, r)), out_shardings=shardings)
    with jax.set_mesh(mesh):
        return init(rng)


def from_params(params, tx) -> TrainState:
    """Fresh step counter and optimizer state around given params (stage hand-off)."""
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def param_shardings(cfg: presets.ModelConfig, mesh, rules: rules_lib.Rules):
    boxed = jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    return rules_lib.logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
