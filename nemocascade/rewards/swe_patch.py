"""SEARCH/REPLACE patches and C1's execution-free SWE reward (agentless repair).

The model answers with edits in the Agentless format, usually inside
```python fences, several per answer and per file:

    ### src/util.py
    <<<<<<< SEARCH
        return x + 3
    =======
        return x + 4
    >>>>>>> REPLACE

`parse_edits` reads them (a block without a `### path` line before it, or an
unterminated block, is unparsable), `apply_edits` applies them in order to
the prompt's files: the SEARCH text must occur in the file (exact text
first, then line by line ignoring trailing whitespace; indentation counts);
the first occurrence is replaced; an empty SEARCH creates a file that is not
in the prompt.

Reward (C1 §4.7, Table 20; similarity as in SWE-RL): the per-file unified
diff of the patched files (`tasks/patch_format.file_diffs`: `difflib`, 3
context lines, hunks without file headers) is compared with the golden patch's per-file hunks by
`difflib.SequenceMatcher(autojunk=False).ratio()`, averaged over the union of
files touched by either (a file only one side touches scores 0):

    unparsable or not applicable    -> -1
    no change to the code (no-op)   ->  0
    otherwise                       ->  similarity in [0, 1] (1 iff identical)

`RewardOptions` adds C1 Table 12's shaping (a final score below
`shaping_threshold` becomes 0) and the semantic term: a judge plug-in
`package.module:function` called as `fn(issue, patch, golden_patch)` with the
unified diffs, returning P(resolves) in [0, 1]; it replaces the similarity of
every applicable, non-identical patch. Options reach the verifier-pool
workers through `$NEMOCASCADE_SWE_REWARD` (`configure`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import json
import os
import re
from collections.abc import Callable

from nemocascade.tasks import patch_format

OPTIONS_ENV = "NEMOCASCADE_SWE_REWARD"
SEARCH, DIVIDER, REPLACE = patch_format.SEARCH, patch_format.DIVIDER, patch_format.REPLACE
_HUNK_HEADER = re.compile(r"^(@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@).*$")


class PatchError(ValueError):
    """An answer whose edits cannot be parsed or applied (reward -1)."""


@dataclasses.dataclass(frozen=True)
class Edit:
    path: str
    search: str
    replace: str


@dataclasses.dataclass(frozen=True)
class RewardOptions:
    """Shaping threshold (0 = off; C1 Table 12 uses 0.5) and judge plug-in ("" = none)."""

    shaping_threshold: float = 0.0
    judge: str = ""

    def __post_init__(self):
        if not 0.0 <= self.shaping_threshold <= 1.0:
            raise ValueError(
                f"swe shaping_threshold must be in [0, 1], got {self.shaping_threshold}"
            )
        if self.judge and ":" not in self.judge:
            raise ValueError(f"swe judge {self.judge!r}: expected 'package.module:function'")


def configure(options: RewardOptions) -> None:
    """Sets the reward options of this process and the verifier workers it spawns."""
    os.environ[OPTIONS_ENV] = json.dumps(dataclasses.asdict(options))
    _options_from.cache_clear()


@functools.cache
def _options_from(text: str) -> RewardOptions:
    return RewardOptions(**json.loads(text)) if text else RewardOptions()


def current_options() -> RewardOptions:
    return _options_from(os.environ.get(OPTIONS_ENV, ""))


@functools.cache
def load_judge(spec: str) -> Callable[[str, str, str], float]:
    """The judge named by `package.module:function` (ValueError naming what is wrong)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"swe judge {spec!r}: expected 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module_name), attr, None)
    except ImportError as e:
        raise ValueError(f"swe judge {spec!r}: cannot import {module_name!r}: {e}") from None
    if not callable(fn):
        raise ValueError(f"swe judge {spec!r}: {module_name} has no function {attr!r}")
    return fn


def parse_edits(answer: str) -> list[Edit]:
    """The SEARCH/REPLACE edits of an answer, in order (PatchError if none or malformed)."""
    edits: list[Edit] = []
    path, state, search, replace = None, "out", [], []
    for number, line in enumerate(answer.splitlines(), 1):
        marker = line.strip()
        if state == "out":
            if marker.startswith("### "):
                path = marker[4:].strip()
            elif marker == SEARCH:
                if not path:
                    raise PatchError(f"line {number}: SEARCH block without a '### path' line")
                state, search, replace = "search", [], []
        elif state == "search":
            if marker == DIVIDER:
                state = "replace"
            elif marker in (SEARCH, REPLACE):
                raise PatchError(f"line {number}: {marker!r} before '{DIVIDER}'")
            else:
                search.append(line)
        elif marker == REPLACE:
            edits.append(Edit(path, _joined(search), _joined(replace)))
            state = "out"
        elif marker in (SEARCH, DIVIDER):
            raise PatchError(f"line {number}: {marker!r} before '{REPLACE}'")
        else:
            replace.append(line)
    if state != "out":
        raise PatchError(f"unterminated {'SEARCH' if state == 'search' else 'REPLACE'} block")
    if not edits:
        raise PatchError("no SEARCH/REPLACE edit found")
    return edits


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _replace_lines(content: str, search: str, replace: str) -> str | None:
    """Line-wise match ignoring trailing whitespace; None if absent."""
    lines = content.splitlines(keepends=True)
    want = [s.rstrip() for s in search.splitlines()]
    for i in range(len(lines) - len(want) + 1):
        if [s.rstrip() for s in lines[i : i + len(want)]] == want:
            tail = "".join(lines[i + len(want) :])
            return "".join(lines[:i]) + replace + tail
    return None


def apply_edits(files: dict[str, str], edits: list[Edit]) -> dict[str, str]:
    """The files after the edits (PatchError naming the edit that does not apply)."""
    out = dict(files)
    for i, edit in enumerate(edits):
        if edit.path not in out:
            if edit.search.strip():
                raise PatchError(f"edit {i}: file {edit.path!r} is not in the prompt")
            out[edit.path] = edit.replace
            continue
        content = out[edit.path]
        if not edit.search.strip():
            raise PatchError(f"edit {i}: empty SEARCH for existing file {edit.path!r}")
        if edit.search in content:
            out[edit.path] = content.replace(edit.search, edit.replace, 1)
            continue
        patched = _replace_lines(content, edit.search, edit.replace)
        if patched is None:
            raise PatchError(f"edit {i}: SEARCH text not found in {edit.path!r}")
        out[edit.path] = patched
    return out


def patch_file_diffs(patch: str) -> dict[str, str]:
    """Per file of a unified/git patch, its hunks (section text after `@@` dropped)."""
    diffs: dict[str, list[str]] = {}
    path, old_path, in_hunk = None, None, False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            path, old_path, in_hunk = None, None, False
        elif not in_hunk and line.startswith("--- "):
            old_path = _strip_prefix(line[4:], "a/")
        elif not in_hunk and line.startswith("+++ "):
            new_path = _strip_prefix(line[4:], "b/")
            path = old_path if new_path == "/dev/null" else new_path
            diffs.setdefault(path, [])
        elif line.startswith("@@") and path is not None:
            match = _HUNK_HEADER.match(line)
            diffs[path].append(match.group(1) if match else line)
            in_hunk = True
        elif in_hunk and line[:1] in (" ", "+", "-", ""):
            diffs[path].append(line)
        elif in_hunk and line.startswith("\\"):
            continue  # "\ No newline at end of file"
        else:
            in_hunk = False
    return {p: "\n".join(lines).rstrip("\n") for p, lines in diffs.items() if lines}


def _strip_prefix(name: str, prefix: str) -> str:
    name = name.split("\t")[0].strip()
    return name[len(prefix) :] if name.startswith(prefix) else name


def similarity(pred: dict[str, str], oracle: dict[str, str]) -> float:
    """SWE-RL's change similarity: mean SequenceMatcher ratio over the union of files."""
    paths = sorted(set(pred) | set(oracle))
    if not paths:
        return 0.0
    total = 0.0
    for path in paths:
        a, b = pred.get(path, ""), oracle.get(path, "")
        if a and b:
            total += difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return total / len(paths)


def patched(answer: str, files: dict[str, str]) -> dict[str, str]:
    """The files after the answer's edits (PatchError if unparsable or not applicable)."""
    return apply_edits(files, parse_edits(answer))


def score(
    answer: str,
    files: dict[str, str],
    golden_patch: str,
    issue: str = "",
    options: RewardOptions | None = None,
) -> tuple[float, dict]:
    """C1's execution-free reward of one answer and its diagnostics (module docstring)."""
    options = options or current_options()
    try:
        new = patched(answer, files)
    except PatchError as e:
        return -1.0, {"error": str(e)}
    pred = patch_format.file_diffs(files, new)
    if not pred:
        return 0.0, {"similarity": 0.0, "noop": True}
    sim = similarity(pred, patch_file_diffs(golden_patch))
    info = {"similarity": sim}
    value = sim
    if options.judge and sim < 1.0:
        pred_patch = patch_format.make_patch(files, new)
        value = float(load_judge(options.judge)(issue, pred_patch, golden_patch))
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"swe judge {options.judge!r} returned {value}, expected [0, 1]")
        info["judge"] = value
    if value < options.shaping_threshold:
        value = 0.0
    return value, info
