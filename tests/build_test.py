"""BUILD stays in step with the tree: every module and test file has its target.

Bazel cannot fetch its rules offline here, so this test parses BUILD instead
of building it. Fix a failure with `python tools/update_build.py`.
"""

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
