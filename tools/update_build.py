"""Regenerates the Bazel BUILD file from the source tree and the layering table below.

    python tools/update_build.py

One `py_library` per package folder (the top-level `nemocascade/` splits into
`config`, `io` and the command-line `tools`), with the `deps` that `LAYERS`
allows it, and one `py_test` per test file. `tests/build_test.py` fails when
BUILD falls out of step, when a module imports a target its own target does
not list in `deps`, or when the targets form a cycle. `LAYERS` is the one
statement of the layering (docs/architecture.md): changing what a package may
import is an edit here, reviewed as such.
"""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("nemocascade", "configs")
# Files of the top-level package by target; the rest are the command-line tools.
TOP_LEVEL = {"config.py": "nemocascade_config", "checkpointing.py": "nemocascade_io"}
TOP_LEVEL["overrides.py"] = "nemocascade_config"
TOP_LEVEL["stage_registry.py"] = "nemocascade_registry"
TOP_LEVEL["metrics.py"] = "nemocascade_io"
TOOLS = "nemocascade_tools"

_KERNELS = ["nemocascade_kernels", "nemocascade_kernels_attention"]
_KERNELS += ["nemocascade_kernels_fused_logprob"]
_REWARDS = ["nemocascade_rewards", "nemocascade_rewards_ifeval", "nemocascade_rewards_sandbox"]
_LOW = ["nemocascade_model", "nemocascade_sharding", "nemocascade_tasks", *_REWARDS]

# target -> the targets its modules may import (besides itself).
LAYERS: dict[str, list[str]] = {
    "nemocascade_kernels": [],
    "nemocascade_kernels_attention": [],
    "nemocascade_kernels_fused_logprob": [],
    "nemocascade_model": ["nemocascade_kernels_attention", "nemocascade_kernels_fused_logprob"],
    "nemocascade_sharding": [],
    "nemocascade_losses": ["nemocascade_kernels_fused_logprob"],
    "nemocascade_tasks": [],
    "nemocascade_rewards_sandbox": [],
    "nemocascade_rewards_ifeval": [],
    "nemocascade_rewards": ["nemocascade_tasks", "nemocascade_rewards_ifeval"]
    + ["nemocascade_rewards_sandbox"],
    "nemocascade_io": [],
    "nemocascade_registry": [],
    # The config checks its values with the libraries it configures (benchmark suite
    # names, reward plug-ins), so it sits above them; no library imports the config.
    "nemocascade_config": ["nemocascade_evaluation", "nemocascade_model", "nemocascade_sharding"]
    + ["nemocascade_tasks", "nemocascade_rewards", "nemocascade_rewards_sandbox"]
    + ["nemocascade_data", "nemocascade_losses", "nemocascade_registry", "nemocascade_rollout"],
    "nemocascade_data": ["nemocascade_tasks", "nemocascade_rewards"],
    "nemocascade_rollout": ["nemocascade_data", "nemocascade_model", "nemocascade_sharding"]
    + ["nemocascade_tasks"],
    "nemocascade_evaluation": ["nemocascade_data", "nemocascade_io", "nemocascade_rollout", *_LOW]
    + ["nemocascade_registry"],
    "nemocascade_trainer": ["nemocascade_config", "nemocascade_data", "nemocascade_evaluation"]
    + ["nemocascade_registry"]
    + ["nemocascade_io", "nemocascade_losses", "nemocascade_rollout", *_KERNELS, *_LOW],
    "nemocascade_trainer_onpolicy": ["nemocascade_config", "nemocascade_data", "nemocascade_io"]
    + ["nemocascade_evaluation", "nemocascade_losses", "nemocascade_rollout"]
    + ["nemocascade_registry", "nemocascade_trainer", *_LOW],
    "nemocascade_trainer_stages": ["nemocascade_config", "nemocascade_data", "nemocascade_io"]
    + ["nemocascade_evaluation", "nemocascade_losses", "nemocascade_rollout"]
    + ["nemocascade_registry", "nemocascade_trainer", "nemocascade_trainer_onpolicy", *_LOW],
    TOOLS: ["nemocascade_config", "nemocascade_data", "nemocascade_evaluation", "nemocascade_io"]
    + ["nemocascade_registry"]
    + ["nemocascade_losses", "nemocascade_rollout", "nemocascade_trainer"]
    + ["nemocascade_trainer_onpolicy", "nemocascade_trainer_stages", *_KERNELS, *_LOW],
    "nemocascade_serve": [TOOLS, "nemocascade_config", "nemocascade_data", "nemocascade_rollout"]
    + ["nemocascade_model", "nemocascade_sharding", "nemocascade_tasks"],
    "configs": ["nemocascade_config"],
}


def library_dirs() -> list[pathlib.Path]:
    out = []
    for top in PACKAGES:
        for d, _, files in os.walk(ROOT / top):
            if "__pycache__" in d:
                continue
            if any(f.endswith(".py") for f in files):
                out.append(pathlib.Path(d))
    return sorted(out)


def target_of(path: pathlib.Path) -> str:
    """The target a source file belongs to."""
    rel = path.resolve().relative_to(ROOT)
    if rel.parent == pathlib.Path("nemocascade"):
        return TOP_LEVEL.get(rel.name, TOOLS)
    return str(rel.parent).replace("/", "_")


def libraries() -> dict[str, list[str]]:
    """target -> its source files (repository-relative)."""
    out: dict[str, list[str]] = {}
    for d in library_dirs():
        for p in sorted(d.glob("*.py")):
            out.setdefault(target_of(p), []).append(str(p.relative_to(ROOT)))
    return dict(sorted(out.items()))


def test_files() -> list[pathlib.Path]:
    tests = [p for p in (ROOT / "tests").rglob("*.py") if p.name.startswith("test_")]
    tests += [p for p in (ROOT / "tests").rglob("*_test.py")]
    return sorted(set(tests))


def _library(name: str, srcs: list[str], deps: list[str], data: list[str]) -> list[str]:
    lines = ["py_library(", f'    name = "{name}",']
    lines.append("    srcs = [" + ", ".join(f'"{s}"' for s in srcs) + "],")
    if data:
        lines.append("    data = [" + ", ".join(f'"{s}"' for s in data) + "],")
    if deps:
        lines.append("    deps = [" + ", ".join(f'":{d}"' for d in sorted(deps)) + "],")
    lines += ['    visibility = ["//visibility:public"],', ")", ""]
    return lines


def render() -> str:
    lines = ["# Generated by tools/update_build.py; checked by tests/build_test.py.", ""]
    lines.append('load("@rules_python//python:defs.bzl", "py_library", "py_test")')
    lines.append("")
    libs = libraries()
    for name, srcs in libs.items():
        if name not in LAYERS:
            raise SystemExit(f"{name}: a new package; give it its deps in LAYERS")
        assets = ROOT / pathlib.Path(srcs[0]).parent / "assets"
        data = sorted(str(p.relative_to(ROOT)) for p in assets.glob("*")) if assets.is_dir() else []
        lines += _library(name, srcs, LAYERS[name], data)
    helpers = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*.py")
        if not p.name.startswith("test_") and not p.name.endswith("_test.py")
    )
    lines += _library("test_support", helpers, list(libs), [])[:-3] + [")", ""]
    for t in test_files():
        rel = str(t.relative_to(ROOT))
        lines.append("py_test(")
        lines.append(f'    name = "{rel[:-3].replace("/", "_")}",')
        lines.append(f'    srcs = ["{rel}"],')
        lines.append(f'    main = "{rel}",')
        lines.append("    deps = [" + ", ".join(f'":{n}"' for n in [*libs, "test_support"]) + "],")
        lines.append(")")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    (ROOT / "BUILD").write_text(render())
    print(f"wrote {ROOT / 'BUILD'}")
