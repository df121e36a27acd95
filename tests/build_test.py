"""BUILD stays in step with the tree: every module and test file has its target.

Bazel cannot fetch its rules offline here, so this test parses BUILD instead
of building it. Fix a failure with `python tools/update_build.py`.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _build_text() -> str:
    return (ROOT / "BUILD").read_text()


def _srcs(text: str) -> set[str]:
    return set(re.findall(r'"([^"]+\.py)"', text))


def test_every_module_is_in_a_py_library():
    srcs = _srcs(_build_text())
    missing = [
        str(p.relative_to(ROOT))
        for top in ("nemocascade", "configs")
        for p in (ROOT / top).rglob("*.py")
        if str(p.relative_to(ROOT)) not in srcs
    ]
    assert not missing, f"missing from BUILD (run tools/update_build.py): {missing}"


def test_every_test_file_has_a_py_test():
    text = _build_text()
    tests = re.findall(r'py_test\(\s*name = "[^"]+",\s*srcs = \["([^"]+)"\]', text)
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*.py")
        if p.name.startswith("test_") or p.name.endswith("_test.py")
    )
    missing = [f for f in files if f not in tests]
    assert not missing, f"test files without py_test (run tools/update_build.py): {missing}"


def test_no_target_points_at_a_missing_file():
    stale = [s for s in _srcs(_build_text()) if not (ROOT / s).exists()]
    assert not stale, f"BUILD names files that do not exist: {stale}"


# ---------------------------------------------------------------- the layering


def _targets(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """py_library name -> (srcs, deps) as BUILD states them."""
    out = {}
    for block in re.findall(r"py_library\((.*?)\n\)", text, re.S):
        name = re.search(r'name = "([^"]+)"', block).group(1)
        srcs = set(re.findall(r'"([^"]+\.py)"', block))
        deps = re.search(r"deps = \[([^\]]*)\]", block)
        out[name] = (srcs, set(re.findall(r'":([^"]+)"', deps.group(1))) if deps else set())
    return out


def _module_file(module: str, owner: dict[str, str]) -> str | None:
    """The source file of `nemocascade.a.b` (a module or a package's __init__), if ours."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        rel = str(candidate.relative_to(ROOT))
        if rel in owner:
            return rel
    return None


def _imported_files(node: ast.AST, owner: dict[str, str]) -> list[str]:
    """Files an import statement loads: `from pkg import mod` is mod, not pkg's __init__."""
    if isinstance(node, ast.Import):
        return [f for a in node.names if (f := _module_file(a.name, owner))]
    if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
        return []
    out = []
    for a in node.names:
        f = _module_file(f"{node.module}.{a.name}", owner) or _module_file(node.module, owner)
        if f:
            out.append(f)
    return out


def import_violations(path: str, source: str, targets) -> list[str]:
    """`path: imports X (target T), not in the deps of its target` for each bad import."""
    owner = {src: name for name, (srcs, _) in targets.items() for src in srcs}
    mine = owner[path]
    allowed = targets[mine][1] | {mine}
    bad = []
    for node in ast.walk(ast.parse(source)):
        for f in _imported_files(node, owner):
            if owner[f] not in allowed:
                bad.append(
                    f"{path}:{node.lineno}: imports {f} (target {owner[f]}), not in deps of {mine}"
                )
    return sorted(set(bad))


def test_every_import_is_allowed_by_the_build_deps():
    targets = _targets(_build_text())
    bad = []
    for name, (srcs, _) in targets.items():
        if name == "test_support":
            continue
        for src in sorted(srcs):
            bad += import_violations(src, (ROOT / src).read_text(), targets)
    assert not bad, "\n".join(bad)


def test_a_wrong_import_is_caught():
    targets = _targets(_build_text())
    losses = "nemocascade/losses/policy.py"
    source = (ROOT / losses).read_text() + "\nfrom nemocascade.trainer import state\n"
    (bad,) = import_violations(losses, source, targets)
    assert "imports nemocascade/trainer/state.py (target nemocascade_trainer)" in bad
    lazy = "def f():\n    from nemocascade.rollout import sampler\n"
    assert import_violations("nemocascade/model/layers.py", lazy, targets)


def test_the_targets_form_no_cycle():
    deps = {name: d for name, (_, d) in _targets(_build_text()).items()}
    state: dict[str, int] = {}

    def visit(node, path):
        if state.get(node) == 1:
            raise AssertionError(f"cycle: {' -> '.join(path + [node])}")
        if state.get(node) == 2:
            return
        state[node] = 1
        for d in deps.get(node, ()):
            visit(d, path + [node])
        state[node] = 2

    for node in deps:
        visit(node, [])
    assert not deps["nemocascade_losses"] & {"nemocascade_trainer", "nemocascade_rollout"}
    assert "nemocascade_config" not in deps["nemocascade_rollout"]
