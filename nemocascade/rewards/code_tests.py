"""Test kinds of the code verifier, run in the sandbox and compared on the host.

Payloads (in `Example.meta`, as in the record schema):

* built-in task world: `tests = [[x, expected], ...]` and `func_name`;
  `func_name(x)` must equal `expected` strictly (1, 1.0 and True differ);
* function call: `tests = {"fn_name": str, "inputs": [[arg, ...], ...],
  "outputs": [value, ...]}`; `fn_name(*args) == value` as Python compares
  plain data (tuples read as lists), within `float_tolerance` if given;
* stdin/stdout: `tests = {"inputs": [str, ...], "outputs": [str, ...]}`;
  the program's stdout must equal the expected output token by token
  (whitespace and line breaks normalised), numbers within `float_tolerance`
  (absolute or relative) if given;
* assertion (HumanEval): `test` (code defining `check(candidate)`) and
  `entry_point`; `prompt_code` is prepended when the program does not define
  the entry point (a completion that is only the function body). `check`
  runs with pristine builtins, the helpers of `prompt_code` and the entry
  point as `candidate`, whose results must be exact builtin types.

Optional in the stdin/stdout and call `tests` dicts: `time_limit_s` (per
case, default 2), `memory_limit_mb` (default 512), `float_tolerance`. All
cases of a program together get at most `TOTAL_TIME_S`; cases not reached
count as failed. Expected outputs never enter the sandbox.
"""

from __future__ import annotations

import dataclasses
import math
import re

from nemocascade.rewards import sandbox

CASE_TIME_LIMIT_S = 2.0
MEMORY_MB = 512
TOTAL_TIME_S = 8.0  # under the verifier pool's default 10 s per item
ASSERT_TIME_LIMIT_S = 6.0
MAX_OUTPUT_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Result:
    """Cases passed of one program; `error` is the first failure's reason."""

    kind: str
    passed: int
    total: int
    error: str | None
    backend: str


def kind(meta: dict) -> str:
    """'builtin', 'call', 'stdio' or 'assert' (assumes `payload_error(meta)` is None)."""
    if "test" in meta:
        return "assert"
    tests = meta["tests"]
    if isinstance(tests, list):
        return "builtin"
    return "call" if "fn_name" in tests else "stdio"


def _limits_error(tests: dict) -> str | None:
    for key in ("time_limit_s", "memory_limit_mb", "float_tolerance"):
        value = tests.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            return f"code record's tests[{key!r}] must be a non-negative number, got {value!r}"
    return None


def payload_error(meta: dict) -> str | None:
    """Why `meta` is no code payload (a message naming the key), or None."""
    if "test" in meta or "entry_point" in meta:
        for key in ("test", "entry_point"):
            if not isinstance(meta.get(key), str) or not meta[key]:
                return f"code record with assertion tests needs {key!r} (a non-empty string)"
        if not isinstance(meta.get("prompt_code", ""), str):
            return "code record's 'prompt_code' must be a string"
        return None
    tests = meta.get("tests")
    if isinstance(tests, list):
        if not tests or not all(isinstance(t, list | tuple) and len(t) == 2 for t in tests):
            return "code record's 'tests' list needs [input, expected] pairs"
        if not isinstance(meta.get("func_name"), str):
            return "code record with a 'tests' list needs 'func_name' (a string)"
        return None
    if not isinstance(tests, dict):
        return (
            "code record needs 'tests' ({'inputs': [...], 'outputs': [...]}, optionally "
            "'fn_name') or 'test' and 'entry_point' (assertion tests)"
        )
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        return "code record's 'tests' needs non-empty lists 'inputs' and 'outputs'"
    if len(inputs) != len(outputs):
        return f"code record's tests have {len(inputs)} inputs but {len(outputs)} outputs"
    if "fn_name" in tests:
        if not isinstance(tests["fn_name"], str) or not tests["fn_name"]:
            return "code record's tests['fn_name'] must be a non-empty string"
        if not all(isinstance(args, list) for args in inputs):
            return "code record's tests['inputs'] must be argument lists when 'fn_name' is set"
    elif not all(isinstance(x, str) for x in inputs + outputs):
        return "code record's stdin/stdout tests need string 'inputs' and 'outputs'"
    return _limits_error(tests)


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _close(got: float, expected: float, tolerance: float) -> bool:
    return abs(got - expected) <= tolerance * max(1.0, abs(expected))


def outputs_match(got: str, expected: str, tolerance: float | None = None) -> bool:
    """Token-wise equality of two program outputs (numbers within `tolerance`)."""
    got_tokens, expected_tokens = got.split(), expected.split()
    if len(got_tokens) != len(expected_tokens):
        return False
    for g, e in zip(got_tokens, expected_tokens, strict=True):
        if g == e:
            continue
        if tolerance is None:
            return False
        g_num, e_num = _number(g), _number(e)
        if g_num is None or e_num is None or not _close(g_num, e_num, tolerance):
            return False
    return True


def values_match(got, expected, tolerance: float | None = None) -> bool:
    """Python equality of plain data (tuples read as lists), numbers within `tolerance`."""
    if isinstance(expected, tuple | list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(values_match(g, e, tolerance) for g, e in zip(got, expected, strict=True))
        )
    numbers = (int, float)
    if tolerance is not None and isinstance(got, numbers) and isinstance(expected, numbers):
        return not isinstance(got, bool) and _close(float(got), float(expected), tolerance)
    return type(got) in (type(None), bool, int, float, str) and got == expected


def _defines(program: str, name: str) -> bool:
    pattern = rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(|^\s*{re.escape(name)}\s*="
    return re.search(pattern, program, re.MULTILINE) is not None


def _tally(kind_: str, outputs, expected: list, match, backend: str, error=None) -> Result:
    if not isinstance(outputs, list) or len(outputs) != len(expected):
        return Result(kind_, 0, len(expected), str(error or "malformed result"), backend)
    passed, first_error = 0, None
    for i, (out, want) in enumerate(zip(outputs, expected, strict=True)):
        ok = isinstance(out, dict) and "error" not in out and match(out, want)
        passed += ok
        if not ok and first_error is None:
            reason = out.get("error") if isinstance(out, dict) else None
            first_error = f"case {i}: {reason or 'wrong answer'}"
    return Result(kind_, passed, len(expected), first_error, backend)


def run(program: str, meta: dict, *, backend: str | None = None) -> Result:
    """Runs `program` on the tests of `meta` (see the module docstring)."""
    box = sandbox.get(backend)
    kind_ = kind(meta)
    if kind_ == "builtin":
        outcome = sandbox.run_code(
            program,
            [tuple(t) for t in meta["tests"]],
            func_name=meta["func_name"],
            timeout_s=CASE_TIME_LIMIT_S,
            backend=box.backend,
        )
        return Result(kind_, outcome.passed, outcome.total, outcome.error, outcome.backend)
    if kind_ == "assert":
        if not _defines(program, meta["entry_point"]) and meta.get("prompt_code"):
            program = meta["prompt_code"] + "\n" + program
        reply = box.check(
            program,
            meta["test"],
            meta["entry_point"],
            meta.get("prompt_code", ""),
            time_limit_s=ASSERT_TIME_LIMIT_S,
            memory_mb=MEMORY_MB,
            max_output_bytes=MAX_OUTPUT_BYTES,
        )
        passed = reply.get("passed") is True
        return Result(
            kind_, int(passed), 1, None if passed else str(reply.get("error")), box.backend
        )
    tests = meta["tests"]
    per_case = float(tests.get("time_limit_s") or CASE_TIME_LIMIT_S)
    tolerance = tests.get("float_tolerance")
    limits = {
        "time_limit_s": per_case,
        "memory_mb": int(tests.get("memory_limit_mb") or MEMORY_MB),
        "max_output_bytes": MAX_OUTPUT_BYTES,
    }
    if kind_ == "call":
        limits["time_limit_s"] = min(TOTAL_TIME_S, per_case * len(tests["inputs"]))
        reply = box.call(program, tests["fn_name"], tests["inputs"], **limits)
        match = lambda out, want: "value" in out and values_match(out["value"], want, tolerance)  # noqa: E731
    else:
        reply = box.stdio(program, tests["inputs"], total_time_s=TOTAL_TIME_S, **limits)
        match = lambda out, want: outputs_match(out.get("stdout", ""), want, tolerance)  # noqa: E731
    outputs = reply.get("outputs")
    return _tally(kind_, outputs, tests["outputs"], match, box.backend, reply.get("error"))
