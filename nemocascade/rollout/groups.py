"""RL rollouts: G samples per prompt, parsed, and laid out as a trainer batch.

`sample_groups` renders every example in its mode, repeats it `group_size`
times (rows `i*G .. i*G+G-1` belong to example i), samples all rows in one
sampler call and returns a `RolloutBatch`. Its `batch` is ready for the
trainer: `forward.sequence_logprobs(params, cfg, batch, temperature=T)`
reproduces `batch["sampler_logprobs"]` wherever `loss_mask` is 1, because the
trainer sees exactly the sampler's layout (left-padded prompt bucket P, then
the completion; T = P + max_new_tokens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.model import presets
from nemocascade.rollout import (
    continuous,
    decoding,
    modes as modes_lib,
    rows as rows_lib,
    sampling_methods,
)
from nemocascade.sharding import rules as rules_lib
from nemocascade.tasks import base as tasks_base

ENGINES = ("static", "continuous")


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
    """N = len(examples) * group_size sampled sequences.

    Attributes:
      example_index: int32 [N], index into the `examples` argument.
      modes: mode name per row.
      completions, thinking, answers: parsed text per row (`Mode.parser`);
        thinking is None without a think block, answer None while it is open.
      finished: bool [N], the turn was closed by `<|im_end|>`.
      truncated: bool [N], no stop token within the budgets.
      lengths: int32 [N], generated tokens (stop and forced tokens included).
      num_forced: int32 [N], tokens forced by the thinking budget.
      batch: trainer arrays, [N, T] each: inputs, targets, positions,
        segment_ids, loss_mask (1 on sampled completion tokens only: not on
        the prompt, pads or forced tokens) and sampler_logprobs (aligned with
        targets, 0 where loss_mask is 0 except on forced tokens).
    """

    example_index: np.ndarray
    modes: tuple[str, ...]
    completions: list[str]
    thinking: list[str | None]
    answers: list[str | None]
    finished: np.ndarray
    truncated: np.ndarray
    lengths: np.ndarray
    num_forced: np.ndarray
    batch: rows_lib.PolicyRows

    def __len__(self) -> int:
        return len(self.example_index)


def trainer_batch(rollout: decoding.Rollout, pad_id: int = 0) -> rows_lib.PolicyRows:
    """The sampler's layout as next-token arrays `[N, P + M]` (see `RolloutBatch.batch`)."""
    prompt, completion = rollout.prompt_tokens, rollout.completion_tokens
    n, p = prompt.shape
    m = completion.shape[1]
    seq = np.concatenate([prompt, completion], axis=1).astype(np.int32)
    targets = np.concatenate([seq[:, 1:], np.full((n, 1), pad_id, np.int32)], axis=1)
    pad_len = (p - rollout.prompt_lengths)[:, None]
    slots = np.arange(p + m, dtype=np.int32)[None]
    segments = np.concatenate(
        [(slots[:, :p] >= pad_len).astype(np.int32), rollout.completion_mask.astype(np.int32)],
        axis=1,
    )
    # Target t = P-1+j is completion token j.
    loss_mask = np.zeros((n, p + m), np.int32)
    loss_mask[:, p - 1 : p - 1 + m] = rollout.completion_mask * (1 - rollout.forced_mask)
    logprobs = np.zeros((n, p + m), np.float32)
    logprobs[:, p - 1 : p - 1 + m] = rollout.logprobs
    return rows_lib.PolicyRows(
        inputs=seq,
        targets=targets,
        positions=np.maximum(slots - pad_len, 0).astype(np.int32),
        segment_ids=segments,
        loss_mask=loss_mask,
        sampler_logprobs=logprobs,
    )


def _parsing(on_finish, rows: Sequence[modes_lib.Mode]):
    """The engine's `on_finish(indices, Rollout)` as `on_finish(indices, completion texts)`."""

    def report(indices: np.ndarray, rollout: decoding.Rollout) -> None:
        texts = [
            rows[i].parser(ids[: int(n)])["completion"]
            for i, ids, n in zip(indices, rollout.completion_tokens, rollout.lengths, strict=True)
        ]
        on_finish(indices, texts)

    return report


def sample_groups(
    params: Any,
    model_cfg: presets.ModelConfig,
    tok: tokenizer_lib.Tokenizer,
    examples: Sequence[tasks_base.Example],
    *,
    group_size: int,
    modes: str | Sequence[str],
    method: sampling_methods.Method,
    max_new_tokens: int,
    rng: jax.Array,
    template: chat_template.Template = chat_template.DEFAULT,
    thinking_budget: int | None = None,
    answer_budget: int | None = None,
    mesh: jax.sharding.Mesh | None = None,
    rules: rules_lib.Rules | None = None,
    engine: str = "static",
    num_slots: int = continuous.DEFAULT_SLOTS,
    on_finish: Callable[[np.ndarray, list[str]], None] | None = None,
) -> RolloutBatch:
    """`group_size` samples of every example in its mode (one name or one per example).

    `engine`: "static" (`decoding.generate`, one batch) or "continuous"
    (`continuous.generate` with `num_slots` slots, the group's prompt prefilled
    once; `on_finish(row_indices, completions)` receives the parsed completion
    texts of rows as they finish, while the rest decode). Both engines give
    the same rows for the same `rng`.
    """
    if group_size <= 0:
        raise ValueError(f"group_size must be > 0, got {group_size}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if on_finish is not None and engine != "continuous":
        raise ValueError("on_finish needs engine='continuous'")
    names = [modes] * len(examples) if isinstance(modes, str) else list(modes)
    if len(names) != len(examples):
        raise ValueError(f"modes has {len(names)} entries for {len(examples)} examples")
    by_name = {
        name: modes_lib.get(name, tok, template, thinking_budget, answer_budget)
        for name in sorted(set(names))
    }
    prompts = [
        by_name[name].example_prompt(tok, ex) for name, ex in zip(names, examples, strict=True)
    ]
    index = np.repeat(np.arange(len(examples), dtype=np.int32), group_size)
    rows = [by_name[names[i]] for i in index]
    extra = {}
    if engine == "continuous":
        extra = {"num_slots": num_slots, "on_finish": on_finish and _parsing(on_finish, rows)}
    generate = continuous.generate if engine == "continuous" else decoding.generate
    rollout = generate(
        params,
        model_cfg,
        [prompts[i] for i in index],
        method=method,
        max_new_tokens=max_new_tokens,
        rng=rng,
        pad_id=tok.pad_id,
        mesh=mesh,
        rules=rules,
        **modes_lib.sampler_kwargs(rows),
        **extra,
    )
    parsed = [
        mode.parser(ids[: int(n)])
        for mode, ids, n in zip(rows, rollout.completion_tokens, rollout.lengths, strict=True)
    ]
    return RolloutBatch(
        example_index=index,
        modes=tuple(m.name for m in rows),
        completions=[p["completion"] for p in parsed],
        thinking=[p["thinking"] for p in parsed],
        answers=[p["answer"] for p in parsed],
        finished=np.asarray([p["finished"] for p in parsed], bool),
        truncated=rollout.truncated,
        lengths=rollout.lengths,
        num_forced=rollout.forced_mask.sum(axis=-1).astype(np.int32),
        batch=trainer_batch(rollout, tok.pad_id),
    )
