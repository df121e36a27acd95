"""Gold verifiers of the task world, one per domain, all `(prompt, completion, example)`.

Each looks only at the answer after `</think>` and scores an unfinished think
block 0. Rules:

* math: the answer holds exactly one `\\boxed{...}` whose content is an
  integer (optional minus sign, digits only) equal to the gold value. Text
  around the box is ignored; a second box, a box only inside the think
  block, or a non-integer box scores 0.
* code: the answer's function (the first fenced block if there is one, else
  the whole answer) must pass every hidden test in the sandbox.
* if: 1 iff every constraint holds (`info["constraints"]` has each result).
* chat_gold: the hidden chat rubric in [0, 1]; for evaluation only.
"""

from __future__ import annotations

import re

from nemocascade.rewards import base, sandbox
from nemocascade.tasks import base as tasks_base, chat, instruction

CODE_TIMEOUT_S = 2.0
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INTEGER = re.compile(r"-?\d{1,40}")
_FENCE = re.compile(r"```[a-zA-Z0-9]*\n(.*?)```", re.DOTALL)


def math(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    boxes = answer.count("\\boxed")
    if boxes != 1:
        return base.RewardResult(0.0, {"error": f"{boxes} boxed answers, expected 1"})
    match = _BOXED.search(answer)
    content = match.group(1).strip() if match else ""
    if not _INTEGER.fullmatch(content):
        return base.RewardResult(0.0, {"error": "boxed answer is not an integer", "pred": content})
    pred = int(content)
    return base.RewardResult(float(pred == example.meta["gold"]), {"pred": pred})


def extract_code(answer: str) -> str:
    """The program in an answer: first fenced block, else the whole text."""
    fenced = _FENCE.search(answer)
    return fenced.group(1) if fenced else answer


def code(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    outcome = sandbox.run_code(
        extract_code(answer),
        [tuple(t) for t in example.meta["tests"]],
        func_name=example.meta["func_name"],
        timeout_s=CODE_TIMEOUT_S,
    )
    info = {"passed": outcome.passed, "total": outcome.total, "backend": outcome.backend}
    if outcome.error is not None:
        info["error"] = outcome.error
    return base.RewardResult(float(outcome.all_passed), info)


def instruction_following(
    prompt: str, completion: str, example: tasks_base.Example
) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    results = instruction.check(answer, example.meta["constraints"])
    return base.RewardResult(float(all(results.values())), {"constraints": results})


def chat_gold(prompt: str, completion: str, example: tasks_base.Example) -> base.RewardResult:
    del prompt
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    parts = chat.rubric(example.meta["keywords"], answer)
    return base.RewardResult(chat.gold_score(example, answer), {"rubric": parts})
