"""Shared pieces of the config files: size variants and section defaults.

Config files import only `ml_collections` and this module. Every config takes
`:tiny` (CPU, built-in task world), `:small` (CPU benchmark size), `:8b` and
`:14b` (Qwen3 shapes on pod meshes).
"""

import ml_collections

SIZES = ("tiny", "small", "8b", "14b")


def parse_arg(arg: str | None, default: str = "tiny") -> str:
    size = arg or default
    if size not in SIZES:
        raise ValueError(f"unknown config variant {size!r}; choose from {SIZES}")
    return size


def base(stage: str, size: str) -> ml_collections.ConfigDict:
    """Sections every stage has, sized for `size`."""
    c = ml_collections.ConfigDict()
    c.stage = stage
    c.model = ml_collections.ConfigDict(
        {"preset": {"tiny": "tiny", "small": "small", "8b": "qwen3_8b", "14b": "qwen3_14b"}[size]}
    )
    c.mesh = ml_collections.ConfigDict(
        {"shape": (1, -1, 1), "rules": "fsdp" if size in ("tiny", "small") else "fsdp_tp"}
    )
    if size in ("8b", "14b"):
        c.mesh.shape = (1, -1, 4)
    c.optim = ml_collections.ConfigDict()
    c.train = ml_collections.ConfigDict()
    c.data = ml_collections.ConfigDict()
    c.init = ml_collections.ConfigDict({"init_from": "", "resume_from": ""})
    c.eval = ml_collections.ConfigDict()
    return c
