"""The one table that maps logical axis names to mesh axes.

The model, KV cache and batches name logical axes only; these presets decide
where they live on the ('data', 'fsdp', 'tensor') mesh:

* `fsdp`: parameters and optimizer state sharded over 'fsdp' along their
  embedding dimension; batches over ('data', 'fsdp'); no tensor parallelism.
* `fsdp_tp`: as `fsdp`, plus heads, MLP width and vocabulary over 'tensor'
  (Megatron-style column/row split), activations' heads/mlp over 'tensor'.
* `fsdp_tp_sp`: as `fsdp_tp`, plus sequence parallelism: the residual stream
  between and around the attention and MLP blocks (`act_res_len`) is split
  along its length over 'tensor' (Megatron-style: the layer norms and residual
  adds run on T/tp tokens, XLA all-gathers the sequence before the column-split
  projections and reduce-scatters after the row-split ones). What full remat
  saves per layer, the block's input, shrinks by the tensor-parallel degree;
  the long-context configs need it to fit 16 GiB chips (docs/kernels.md).
* `decode`: the sampler's layout: batch over ('data', 'fsdp'), heads over
  'tensor', parameters replicated over 'fsdp' along the batch-parallel axis.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec

Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

_BATCH = ("data", "fsdp")
_COMMON: Rules = (
    ("act_batch", _BATCH),
    ("act_len", None),
    ("act_embed", None),
    ("cache_batch", _BATCH),
    ("cache_len", None),
    ("layers", None),
    ("head_dim", None),
    ("norm", None),
)

# Heads, MLP width and vocabulary over 'tensor' (parameters, activations, cache).
_TP: Rules = (
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("cache_kv_heads", "tensor"),
)

PRESETS: dict[str, Rules] = {
    "fsdp": _COMMON
    + (
        ("act_res_len", None),
        ("embed", "fsdp"),
        ("vocab", None),
        ("heads", None),
        ("kv_heads", None),
        ("mlp", None),
        ("act_heads", None),
        ("act_kv_heads", None),
        ("act_mlp", None),
        ("act_vocab", None),
        ("cache_kv_heads", None),
    ),
    "fsdp_tp": _COMMON + _TP + (("embed", "fsdp"), ("act_res_len", None)),
    "fsdp_tp_sp": _COMMON + _TP + (("embed", "fsdp"), ("act_res_len", "tensor")),
    "decode": _COMMON + _TP + (("embed", None), ("act_res_len", None)),
}


def get_rules(name: str) -> Rules:
    """The named preset, checked for conflicts."""
    if name not in PRESETS:
        raise ValueError(f"sharding.rules={name!r} is unknown; choose from {sorted(PRESETS)}")
    return validate(PRESETS[name])


def validate(rules: Rules) -> Rules:
    """Rejects a logical name mapped twice to different mesh axes."""
    seen: dict[str, object] = {}
    for name, target in rules:
        if name in seen and seen[name] != target:
            raise ValueError(
                f"conflicting sharding rules for logical axis {name!r}: "
                f"{seen[name]!r} vs {target!r}"
            )
        seen[name] = target
    return tuple(rules)


def logical_to_sharding(logical_tree, mesh, rules: Rules):
    """Maps a pytree of logical PartitionSpecs to NamedShardings on `mesh`."""
    return nn.logical_to_mesh_sharding(logical_tree, mesh, rules)


def spec(names: tuple[str | None, ...], rules: Rules) -> PartitionSpec:
    """PartitionSpec of one array given its logical axis names."""
    return nn.logical_to_mesh_axes(names, rules)


def batch_sharding(mesh, rules: Rules, ndim: int = 2) -> NamedSharding:
    """Sharding of a [B, ...] batch array: batch over the data-parallel axes."""
    return NamedSharding(mesh, spec(("act_batch",) + (None,) * (ndim - 1), rules))


def batch_shards(mesh, rules: Rules) -> int:
    """How many ways a batch is split: the mesh axes of `act_batch` (never 'tensor').

    Not `batch_sharding(...).num_devices`, which counts every device of the
    mesh, tensor-parallel ones included.
    """
    axes = spec(("act_batch",), rules)[0]
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return math.prod(mesh.shape[a] for a in axes)


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def put_batch(batch: dict, mesh, rules: Rules) -> dict:
    """Places a host batch (numpy, process-local on multi-host) on the mesh."""
    out = {}
    for k, v in batch.items():
        sharding = batch_sharding(mesh, rules, v.ndim)
        if jax.process_count() > 1:
            out[k] = jax.make_array_from_process_local_data(sharding, v)
        else:
            out[k] = jax.device_put(v, sharding)
    return out
