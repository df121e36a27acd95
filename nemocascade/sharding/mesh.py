"""Device mesh construction over the axes ('data', 'fsdp', 'tensor')."""

from __future__ import annotations

import math

import jax

AXES = ("data", "fsdp", "tensor")


def resolve_shape(shape: tuple[int, ...], num_devices: int) -> tuple[int, ...]:
    """Fills one `-1` entry so the product equals `num_devices`.

    Raises ValueError naming `mesh.shape` when the shape cannot cover the devices.
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(AXES):
        raise ValueError(f"mesh.shape={shape} must have {len(AXES)} entries for axes {AXES}")
    if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh.shape={shape}: entries must be positive, with at most one -1")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if num_devices % known:
            raise ValueError(
                f"mesh.shape={shape} does not divide the {num_devices} available devices"
            )
        shape = tuple(num_devices // known if s == -1 else s for s in shape)
    if math.prod(shape) != num_devices:
        raise ValueError(
            f"mesh.shape={shape} uses {math.prod(shape)} devices but {num_devices} are available"
        )
    return shape


def make_mesh(shape: tuple[int, ...] = (1, -1, 1), devices=None) -> jax.sharding.Mesh:
    """A mesh over all (or the given) devices with axes `AXES`."""
    devices = jax.devices() if devices is None else devices
    shape = resolve_shape(shape, len(devices))
    return jax.make_mesh(
        shape,
        AXES,
        axis_types=(jax.sharding.AxisType.Auto,) * len(AXES),
        devices=devices,
    )


def make_abstract_mesh(shape: tuple[int, ...]) -> jax.sharding.AbstractMesh:
    """A device-free mesh of the given (fully specified) shape, for `.lower()` checks."""
    return jax.sharding.AbstractMesh(
        tuple(shape), AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(AXES)
    )
