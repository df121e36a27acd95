"""Math answer equivalence with Hugging Face `math-verify`, bounded in time.

    ok, info = math_answer.check("... so \\boxed{\\frac{1}{2}}", "0.5")   # ok is True

Rules:

* the model's answer is the content of the *last* `\\boxed{...}` (or
  `\\fbox{...}`, braces balanced) in the answer text;
* when there is no box, a fallback extraction may apply (`FALLBACKS`):
  `"none"` (score 0), `"gsm8k"` (the text after the last `####`, GSM8K's
  convention), `"last_number"` (the last number in the text) or
  `"math_verify"` (math-verify's own anchors: "final answer is ...", the last
  LaTeX or plain expression);
* the gold answer is a string: `"42"`, `"\\frac{3}{4}"`, `"(0,1]"`; a gold that
  holds a box or a `#### N` line (a full GSM8K/MATH solution) is reduced the
  same way first;
* both sides are parsed by math-verify (LaTeX, fractions vs decimals,
  radicals, intervals, sets, `\\text{}` and units, `x = 3` against `3`) and
  compared with `math_verify.verify(gold, pred)`, which is what decides.

Time: the whole check (both parses and the comparison) runs under one
`SIGALRM` deadline of `timeout_s` seconds when called on a process's main
thread (verifier-pool workers and the evaluation loop); past it the check
scores False with `info["error"] = "timeout"`. Work that never returns to the
interpreter (one huge C-level integer power) cannot be interrupted by a
signal; the verifier pool's per-item timeout kills the worker then.
"""

from __future__ import annotations

import functools
import logging
import re
import signal
import threading
from typing import Any

import math_verify

FALLBACKS = ("none", "gsm8k", "last_number", "math_verify")
DEFAULT_TIMEOUT_S = 2.0

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed\s+([^\s$]+)")  # `\boxed 5`, as some models write it
_GSM8K = re.compile(r"####\s*(.+)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_CONFIG = (
    math_verify.LatexExtractionConfig(boxed_match_priority=0),
    math_verify.ExprExtractionConfig(),
)
# We run math-verify without its own per-call alarms (we own one deadline for the
# whole check), so its "timeout is disabled" warning would be misleading.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class _Deadline(BaseException):
    """Raised by the alarm; a BaseException so math-verify's `except Exception` lets it pass."""


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`/`\\fbox{...}` (balanced braces), else None."""
    starts = [m.end() for m in _BOX_OPEN.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    bare = _BOX_BARE.findall(text)
    return bare[-1].strip() if bare else None


def extract(text: str, fallback: str = "none") -> str | None:
    """The answer expression in a model answer (module docstring rules), or None."""
    if fallback not in FALLBACKS:
        raise ValueError(f"math answer fallback {fallback!r}; valid: {', '.join(FALLBACKS)}")
    boxed = last_boxed(text)
    if boxed is not None or fallback == "none":
        return boxed
    if fallback == "gsm8k":
        found = _GSM8K.findall(text)
        return found[-1].strip() if found else None
    if fallback == "last_number":
        found = _NUMBER.findall(text)
        return found[-1].replace(",", "") if found else None
    return text  # "math_verify": the whole text goes to math-verify's own extraction


def gold_text(gold: str) -> str:
    """The gold expression: a boxed or `#### N` solution is reduced to its answer."""
    boxed = last_boxed(gold)
    if boxed is not None:
        return boxed
    found = _GSM8K.findall(gold)
    return found[-1].strip() if found else gold.strip()


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple:
    return tuple(math_verify.parse(f"\\boxed{{{gold}}}", _CONFIG, parsing_timeout=None))


def _compare(pred: str, gold: str, whole_text: bool) -> tuple[bool, Any]:
    parsed_gold = list(_parse_gold(gold))
    source = pred if whole_text else f"\\boxed{{{pred}}}"
    parsed_pred = math_verify.parse(source, _CONFIG, parsing_timeout=None)
    ok = bool(math_verify.verify(parsed_gold, parsed_pred, timeout_seconds=None))
    return ok, parsed_pred


def _with_deadline(fn, timeout_s: float):
    """`fn()` under a SIGALRM deadline on the main thread; unbounded elsewhere."""
    if timeout_s <= 0 or threading.current_thread() is not threading.main_thread():
        return fn()

    def on_alarm(signum, frame):
        raise _Deadline()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(
    answer: str,
    gold: str,
    *,
    fallback: str = "none",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[bool, dict[str, Any]]:
    """(equivalent, info) for a model answer text against a gold answer string.

    `info` holds `pred` (the extracted expression) and, when the check fails
    for a reason other than inequality, `error`.
    """
    pred = extract(answer, fallback)
    if pred is None:
        return False, {
            "error": "no \\boxed{} answer" + ("" if fallback == "none" else " or fallback")
        }
    info: dict[str, Any] = {"pred": pred[:200]}
    whole_text = fallback == "math_verify" and last_boxed(answer) is None
    try:
        ok, parsed = _with_deadline(lambda: _compare(pred, gold_text(gold), whole_text), timeout_s)
    except _Deadline:
        return False, {**info, "error": f"timeout after {timeout_s}s"}
    if not parsed:
        info["error"] = "answer did not parse"
    return ok, info
