"""Completions of prompt records in one decoding mode, in fixed-size sampler batches.

The library behind `generate`, `evaluate` and the benchmark suites: records
are `{"prompt": str}` or `{"messages": [...]}` (a conversation ending with a
user turn); each comes back with `completion`, `thinking`, `answer`,
`num_tokens`, `token_ids` (the generated ids, stop token included) and
`truncated`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from nemocascade.rollout import continuous, decoding, modes as modes_lib, sampling_methods


def method_from(temperature: float, top_p: float, top_k: int) -> sampling_methods.Method:
    """Greedy at temperature 0, else sampling (ValueError on bad values)."""
    if temperature == 0:
        return sampling_methods.Greedy()
    return sampling_methods.Sample(temperature=temperature, top_k=top_k, top_p=top_p)


def messages_of(record: dict) -> list[dict]:
    return record.get("messages") or [{"role": "user", "content": record["prompt"]}]


def complete(
    params,
    cfg,
    tok,
    records: Sequence[dict],
    mode: modes_lib.Mode,
    *,
    method,
    max_new_tokens,
    batch_size,
    seed,
    mesh,
    rules,
    engine: str = "static",
) -> list[dict]:
    """Each record plus its completion fields.

    engine "static": sampler calls of `batch_size` records each; "continuous":
    one `continuous.generate` call over all records with `batch_size` slots.
    """
    if engine not in ("static", "continuous"):
        raise ValueError(f"engine must be 'static' or 'continuous', got {engine!r}")
    out = []
    step = batch_size if engine == "static" else max(len(records), 1)
    for start in range(0, len(records), step):
        chunk = records[start : start + step]
        prompts = [mode.prompt(tok, messages_of(r)) for r in chunk]
        kwargs = {"num_slots": batch_size} if engine == "continuous" else {}
        generate = continuous.generate if engine == "continuous" else decoding.generate
        rollout = generate(
            params,
            cfg,
            prompts,
            method=method,
            max_new_tokens=max_new_tokens,
            rng=jax.random.fold_in(jax.random.key(seed), start),
            pad_id=tok.pad_id,
            mesh=mesh,
            rules=rules,
            **modes_lib.sampler_kwargs([mode] * len(chunk)),
            **kwargs,
        )
        for j, record in enumerate(chunk):
            n = int(rollout.lengths[j])
            parsed = mode.parser(rollout.completion_tokens[j, :n])
            out.append(
                {
                    **record,
                    "completion": parsed["completion"],
                    "thinking": parsed["thinking"],
                    "answer": parsed["answer"],
                    "num_tokens": n,
                    "token_ids": [int(t) for t in rollout.completion_tokens[j, :n]],
                    "truncated": bool(rollout.truncated[j]),
                }
            )
    return out
