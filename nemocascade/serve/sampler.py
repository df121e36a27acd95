"""The sampler call the serving engine runs: `continuous.generate` or `decoding.generate`.

`sampler_fn` binds a loaded model; the engine calls the result once per batch
of rows, with hooks for the continuous sampler (joining rows, per-row
`max_tokens`, token reports) that the static sampler ignores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nemocascade.rollout import continuous, decoding, groups, modes as modes_lib

# (prompts, modes, method, max_new_tokens, rng, on_finish, **hooks) -> None;
# calls on_finish(row indices, their rows as a decoding.Rollout) as rows
# finish, every row exactly once. Hooks a sampler may use or ignore (the
# static one ignores them): num_slots, prompt_bucket, max_tokens (per row),
# more(room) -> [(prompt, mode, max_tokens)] rows joining the call (their
# indices follow), on_tokens(indices, tokens, lengths) and token_rows(indices)
# (`continuous.generate`'s).
SampleFn = Callable[..., None]
ENGINES = groups.ENGINES


def sampler_fn(
    params,
    model_cfg,
    pad_id: int,
    mesh=None,
    rules=None,
    *,
    engine: str = "continuous",
    num_slots: int = continuous.DEFAULT_SLOTS,
    chunk_steps: int = continuous.DEFAULT_CHUNK_STEPS,
) -> SampleFn:
    """The sampler call of a loaded model (`generate.load`).

    `engine="continuous"`: `continuous.generate` with `num_slots` slots (or
    the call's `num_slots` hook), reporting rows as they finish, tokens per
    chunk and taking joining rows; `"static"`: `decoding.generate`, reporting
    every row when the call returns. Same tokens for the same key.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")

    def sample(prompts, modes, method, max_new_tokens, rng, on_finish, **hooks) -> None:
        kwargs = dict(
            method=method,
            max_new_tokens=max_new_tokens,
            rng=rng,
            pad_id=pad_id,
            mesh=mesh,
            rules=rules,
            **modes_lib.sampler_kwargs(modes),
        )
        if engine == "continuous":
            more = hooks.get("more")
            if more is not None:
                rows = more  # [(prompt, mode)] -> continuous.Request

                def more(room):
                    return [
                        continuous.Request(q, m.thinking_budget, m.answer_budget, limit)
                        for q, m, limit in rows(room)
                    ]

            continuous.generate(
                params,
                model_cfg,
                prompts,
                num_slots=min(hooks.get("num_slots") or num_slots, num_slots),
                chunk_steps=chunk_steps,
                on_finish=on_finish,
                more=more,
                prompt_bucket=hooks.get("prompt_bucket", 0),
                on_tokens=hooks.get("on_tokens"),
                token_rows=hooks.get("token_rows"),
                max_tokens=hooks.get("max_tokens"),
                **kwargs,
            )
        else:
            rollout = decoding.generate(params, model_cfg, prompts, **kwargs)
            on_finish(np.arange(len(prompts)), rollout)

    return sample
