"""Pallas attention kernels under `jax.shard_map`: batch over the data axes, heads over `tensor`.

A `pallas_call` is opaque to XLA's partitioner, so a kernel called on sharded
activations would be run on gathered arrays. Inside `shard_map` each device
runs the kernel on its own batch rows and heads; attention needs nothing from
other shards (GQA groups stay together because query heads and kv heads are
split into the same number of contiguous blocks). The sequence stays whole on
each device (no context parallelism).

The mesh is the current one (`jax.set_mesh` / `jax.sharding.use_abstract_mesh`);
the axes come from the caller's logical sharding rules (`MeshAxes`). When the
shapes do not divide by the mesh axes, `attention` returns None and the caller
falls back to an XLA implementation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax

P = jax.sharding.PartitionSpec


@dataclasses.dataclass(frozen=True)
class MeshAxes:
    """Mesh axes of the batch, query-head and kv-head dimensions (None: replicated)."""

    batch: str | tuple[str, ...] | None
    heads: str | tuple[str, ...] | None
    kv_heads: str | tuple[str, ...] | None


def _size(mesh, axes) -> int:
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else axes
    return math.prod(mesh.shape[a] for a in axes)


def attention(
    kernel: Callable[..., jax.Array], q_btnh, k_btkh, v_btkh, seg_bt, axes: MeshAxes
) -> jax.Array | None:
    """`kernel(q, k, v, seg)` per shard, or None if there is no mesh or shapes do not divide."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return kernel(q_btnh, k_btkh, v_btkh, seg_bt)
    b, n, k = q_btnh.shape[0], q_btnh.shape[2], k_btkh.shape[2]
    nb, nh, nk = _size(mesh, axes.batch), _size(mesh, axes.heads), _size(mesh, axes.kv_heads)
    if b % nb or n % nh or k % nk or nh != nk:
        return None
    q_spec = P(axes.batch, None, axes.heads, None)
    kv_spec = P(axes.batch, None, axes.kv_heads, None)
    return jax.shard_map(
        kernel,
        mesh=mesh,
        in_specs=(q_spec, kv_spec, kv_spec, P(axes.batch, None)),
        out_specs=q_spec,
        # Pallas outputs carry no varying-axis types; nothing crosses shards.
        check_vma=False,
    )(q_btnh, k_btkh, v_btkh, seg_bt)
