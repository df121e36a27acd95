"""The Agentless SEARCH/REPLACE edit format and unified diffs of file sets.

Shared by the task world's SWE domain (answers and golden patches) and the
SWE reward (`nemocascade.rewards.swe_patch`, which parses and applies edits):
an edit is a `### path` line and one block

    <<<<<<< SEARCH
    (lines to find)
    =======
    (lines to put in their place)
    >>>>>>> REPLACE

A file set's diff is per changed file the `difflib` unified diff with
`CONTEXT_LINES` lines of context, without its `---`/`+++` header lines.
"""

from __future__ import annotations

import difflib

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
CONTEXT_LINES = 3  # git's default, and SWE-RL's


def edit_text(path: str, search: str, replace: str) -> str:
    """One edit in the Agentless format (without the optional ```python fence)."""
    return f"### {path}\n{SEARCH}\n{search}\n{DIVIDER}\n{replace}\n{REPLACE}"


def file_diffs(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """Per changed file, its unified diff hunks (no file headers, no trailing newline)."""
    diffs = {}
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path, ""), new.get(path, "")
        if a == b:
            continue
        lines = difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=CONTEXT_LINES)
        diffs[path] = "\n".join(list(lines)[2:])
    return diffs


def make_patch(old: dict[str, str], new: dict[str, str]) -> str:
    """A git-style patch of the changed files (what a golden patch looks like)."""
    parts = []
    for path, hunks in file_diffs(old, new).items():
        parts.append(f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunks}\n")
    return "".join(parts)
