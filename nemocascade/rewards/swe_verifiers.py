"""The SWE verifiers: C1's execution-free patch reward and the executed resolved check.

Payload (`Example.meta`), as in the released SWE RL records (docs/data.md):

* `golden_patch`: the reference fix, a unified (git) diff;
* the files the prompt shows: `relevant_file_contents` (real records: a
  `{path: content}` dict, a list of `{"file_path"|"path", "content"}` dicts,
  or either as a JSON string) or `files` (the task world's dict);
* task world only: `hidden_test` (code defining `check(candidate)`) and
  `entry_point`, the tests that fail before and pass after the golden patch.

`swe` (the training reward, registry name "swe") scores the answer after
`</think>` with `swe_patch.score` under the options `swe_patch.configure`
set. `swe_resolved` (evaluation only, the domain's gold verifier) applies the
edits and runs the hidden tests in the sandbox: 1 iff they all pass. The
repository's modules are joined into one program, their imports of each
other dropped (the task world's function names are unique across files).
"""

from __future__ import annotations

import json
import re

from nemocascade.rewards import base, code_tests, swe_patch
from nemocascade.tasks import base as tasks_base

_PATH_KEYS = ("file_path", "path", "file", "filename", "file_name")
_CONTENT_KEYS = ("content", "file_content", "contents", "code")


def _files_value(meta: dict):
    value = meta.get("relevant_file_contents", meta.get("files"))
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            return None, f"swe record 'relevant_file_contents' is a string but not JSON ({e.msg})"
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            item = item if isinstance(item, dict) else {}
            path = next((item[k] for k in _PATH_KEYS if k in item), None)
            text = next((item[k] for k in _CONTENT_KEYS if k in item), None)
            if not isinstance(path, str) or not isinstance(text, str):
                return None, (
                    f"swe record 'relevant_file_contents'[{i}] needs a path "
                    f"({'/'.join(_PATH_KEYS)}) and a content ({'/'.join(_CONTENT_KEYS)}) string"
                )
            out[path] = text
        value = out
    if not isinstance(value, dict) or not value:
        return (
            None,
            "swe record needs 'relevant_file_contents' (the prompt's files: {path: content})",
        )
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None, "swe record 'relevant_file_contents' must map path strings to content strings"
    return value, None


def files_of(meta: dict) -> dict[str, str]:
    """The prompt's files {path: content} (ValueError naming the key if malformed)."""
    files, error = _files_value(meta)
    if error:
        raise ValueError(error)
    return files


def payload_error(meta: dict) -> str | None:
    """Why `meta` is no swe payload (a message naming the key), or None."""
    patch = meta.get("golden_patch")
    if not isinstance(patch, str) or not swe_patch.patch_file_diffs(patch):
        return "swe record needs 'golden_patch' (a unified diff with at least one hunk)"
    _, error = _files_value(meta)
    if error:
        return error
    if ("hidden_test" in meta) != ("entry_point" in meta):
        return "swe record with hidden tests needs both 'hidden_test' and 'entry_point'"
    return None


def _require(meta: dict) -> None:
    error = payload_error(meta)
    if error is not None:
        raise ValueError(error)


def swe(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    """Execution-free reward: -1 unparsable/not applicable, 0 no-op, else similarity."""
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    _require(example.meta)
    value, info = swe_patch.score(
        answer, files_of(example.meta), example.meta["golden_patch"], issue=prompt
    )
    return base.RewardResult(value, info)


def program(files: dict[str, str]) -> str:
    """The repository as one program: modules joined, imports between them dropped."""
    modules = {p.rsplit("/", 1)[-1].removesuffix(".py") for p in files if p.endswith(".py")}
    local = "|".join(re.escape(m) for m in sorted(modules)) or r"(?!)"
    own_import = re.compile(rf"^\s*(from\s+\.?({local})\s+import\s+.*|import\s+({local}))\s*$")
    kept = [
        line
        for path in sorted(files)
        for line in files[path].splitlines()
        if not own_import.match(line)
    ]
    return "\n".join(kept) + "\n"


def run_hidden_tests(files: dict[str, str], meta: dict) -> code_tests.Result:
    """The hidden tests of `meta` on `files`, in the sandbox."""
    return code_tests.run(
        program(files), {"test": meta["hidden_test"], "entry_point": meta["entry_point"]}
    )


def swe_resolved(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    """1 iff the answer's edits apply and the hidden tests pass (evaluation only).

    `info` also has the execution-free terms of the same answer: `similarity`
    (unparsable counts 0) and `reward` (`swe_patch.score` without options).
    """
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished({"similarity": 0.0, "reward": 0.0})
    _require(example.meta)
    files = files_of(example.meta)
    sim, info = swe_patch.score(
        answer, files, example.meta["golden_patch"], issue=prompt, options=swe_patch.RewardOptions()
    )
    info = {**info, "similarity": max(sim, 0.0), "reward": sim}
    if "hidden_test" not in example.meta:
        return base.RewardResult(0.0, {**info, "error": "record has no hidden tests"})
    if sim < 0:
        return base.RewardResult(0.0, info)
    result = run_hidden_tests(swe_patch.patched(answer, files), example.meta)
    if result.error is not None:
        info["error"] = result.error
    return base.RewardResult(float(result.passed == result.total), info)
