"""Gold verifiers of the task world, one per domain, all `(prompt, completion, example)`.

Each looks only at the answer after `</think>` and scores an unfinished think
block 0. Rules:

* math, real records (`meta["answer"]`, a gold string): the last `\\boxed{}`
  of the answer is equivalent to the gold under math-verify
  (`math_answer.check`; `meta["answer_fallback"]` picks an extraction for
  answers without a box, e.g. "gsm8k" for `#### 42`); each check is bounded
  by `MATH_TIMEOUT_S`.
* math, task world (`meta["gold"]`, an int): the answer holds exactly one
  `\\boxed{...}` whose content is an integer (optional minus sign, digits
  only) equal to the gold value. Text around the box is ignored; a second
  box, a box only inside the think block, or a non-integer box scores 0.
* code: the answer's program (the first fenced block if there is one, else
  the whole answer) must pass every hidden test in the sandbox; test kinds
  (function calls, stdin/stdout, assertions) in `code_tests`.
* if: 1 iff every instruction holds. Real records carry IFEval/IFBench
  `meta["instruction_id_list"]` + `meta["kwargs"]`, checked strictly by
  `ifeval.scoring` (`info["instructions"]` has each result); the task world
  carries `meta["constraints"]` (`info["constraints"]`).
* chat_gold: the hidden chat rubric in [0, 1]; for evaluation only.
"""

from __future__ import annotations

import re

from nemocascade.rewards import base, code_tests, math_answer, swe_verifiers
from nemocascade.rewards.ifeval import scoring as ifeval_scoring
from nemocascade.tasks import base as tasks_base, chat, instruction

MATH_TIMEOUT_S = 2.0  # one math-verify check (parse both sides + compare)
IF_LOOSE = False  # IF reward on strict scoring (C1 §4.4: all constraints hold)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INTEGER = re.compile(r"-?\d{1,40}")
_FENCE = re.compile(r"```[a-zA-Z0-9]*\n(.*?)```", re.DOTALL)


def math(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    if "gold" in example.meta:  # the task world's integer fast path
        return _math_integer(answer, example.meta["gold"])
    _require(example.meta, "math")
    ok, info = math_answer.check(
        answer,
        example.meta["answer"],
        fallback=example.meta.get("answer_fallback", "none"),
        timeout_s=MATH_TIMEOUT_S,
    )
    return base.RewardResult(float(ok), info)


def _math_integer(answer: str, gold: int) -> base.RewardResult:
    boxes = answer.count("\\boxed")
    if boxes != 1:
        return base.RewardResult(0.0, {"error": f"{boxes} boxed answers, expected 1"})
    match = _BOXED.search(answer)
    content = match.group(1).strip() if match else ""
    if not _INTEGER.fullmatch(content):
        return base.RewardResult(0.0, {"error": "boxed answer is not an integer", "pred": content})
    pred = int(content)
    return base.RewardResult(float(pred == gold), {"pred": pred})


def extract_code(answer: str) -> str:
    """The program in an answer: first fenced block, else the whole text."""
    fenced = _FENCE.search(answer)
    return fenced.group(1) if fenced else answer


def code(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    """All tests pass (C1 §4.6); `info` has the pass rate. Kinds: `code_tests`."""
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    error = code_tests.payload_error(example.meta)
    if error is not None:
        raise ValueError(error)
    result = code_tests.run(extract_code(answer), example.meta)
    info = {
        "passed": result.passed,
        "total": result.total,
        "pass_rate": result.passed / result.total,
        "kind": result.kind,
        "backend": result.backend,
    }
    if result.error is not None:
        info["error"] = result.error
    return base.RewardResult(float(result.passed == result.total), info)


def instruction_following(
    prompt: str, completion: str, example: tasks_base.Example
) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    if "constraints" in example.meta:  # the task world's own constraint kinds
        results = instruction.check(answer, example.meta["constraints"])
        return base.RewardResult(float(all(results.values())), {"constraints": results})
    _require(example.meta, "if")
    ids, kwargs = example.meta["instruction_id_list"], example.meta["kwargs"]
    strict = ifeval_scoring.follows(answer, ids, kwargs, example.prompt)
    info = {"instructions": dict(zip(ids, strict, strict=True))}
    if IF_LOOSE:
        loose = ifeval_scoring.follows(answer, ids, kwargs, example.prompt, loose=True)
        return base.RewardResult(float(all(loose)), {**info, "loose": loose})
    return base.RewardResult(float(all(strict)), info)


def _require(meta: dict, domain: str) -> None:
    error = payload_error(domain, meta)
    if error is not None:
        raise ValueError(error)


def _math_payload_error(meta: dict) -> str | None:
    if "gold" in meta:
        return None if isinstance(meta["gold"], int) else "math record 'gold' must be an integer"
    if not isinstance(meta.get("answer"), str) or not meta["answer"].strip():
        return "math record needs 'answer' (a non-empty string)"
    fallback = meta.get("answer_fallback", "none")
    if fallback not in math_answer.FALLBACKS:
        return f"math record 'answer_fallback'={fallback!r}; valid: {math_answer.FALLBACKS}"
    return None


def _if_payload_error(meta: dict) -> str | None:
    if "constraints" in meta:
        return None
    ids, kwargs = meta.get("instruction_id_list"), meta.get("kwargs")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not ids:
        return "if record needs 'instruction_id_list' (a non-empty list of strings)"
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        return f"if record needs 'kwargs' (a list of {len(ids)} dicts, one per instruction id)"
    if not all(k is None or isinstance(k, dict) for k in kwargs):
        return "if record 'kwargs' entries must be dicts (or null)"
    for instruction_id in ids:
        try:
            ifeval_scoring.checker_class(instruction_id)
        except ValueError as e:
            return f"if record 'instruction_id_list': {e}"
    return None


_PAYLOAD_ERRORS = {
    "math": _math_payload_error,
    "if": _if_payload_error,
    "swe": swe_verifiers.payload_error,
}


def chat_gold(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    parts = chat.rubric(example.meta["keywords"], answer)
    return base.RewardResult(chat.gold_score(example, answer), {"rubric": parts})


def payload_error(domain: str, meta: dict) -> str | None:
    """Why `meta` is no verification payload for `domain` (a message naming the key), or None."""
    if domain == "code":
        return code_tests.payload_error(meta)
    rule = _PAYLOAD_ERRORS.get(domain)  # math, if, swe; chat has no payload
    return None if rule is None else rule(meta)
