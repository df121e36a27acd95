"""The evaluation matrix: every domain × decoding mode, scored by the gold verifiers.

    metrics = matrix.evaluate(params, cfg, tok, domains=("math", "chat"), modes=("thinking",
                              "instruct"), num_per_domain=64, max_new_tokens=192,
                              thinking_budget=160, batch_size=64, template=template)
    matrix.write(path, "sft", metrics)

Examples come from the eval split, spread evenly over the split's difficulty
levels, deterministic in `seed`. Keys, per domain d and mode m:

* `d/m/pass@1`: greedy decoding, mean verifier score (math, code, if are 0/1);
  for chat, the fraction of answers whose gold rubric score is >= 0.75;
* `chat/m/gold`: mean gold rubric score of the greedy answers;
* `swe/m/pass@1` is the resolved rate (hidden tests executed on the patched
  files); `swe/m/similarity` and `swe/m/reward` are the execution-free terms
  of the same greedy patches (lexical similarity to the golden patch, and
  C1's reward: -1 unparsable or not applicable, 0 no-op, else similarity);
* `d/m/mean_len`: mean generated tokens; `d/m/truncated`: fraction without a stop token;
* `d/m/mean@k` (k = `samples` > 0): mean score of k samples per prompt at
  `temperature`, top-p 0.95 (the paper's evaluation sampling); for chat the
  score is the gold rubric value.

To keep it fast every domain × mode row goes into the same few sampler calls
(modes are per-row data in the sampler), in near-equal chunks of at most
`batch_size` rows ordered by prompt length, so chunks share one compile.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.model import presets
from nemocascade.rewards import pool as pool_lib, registry as rewards_registry
from nemocascade.rollout import decoding, modes as modes_lib, sampling_methods
from nemocascade.sharding import rules as rules_lib
from nemocascade.tasks import base as tasks_base, registry as tasks_registry

CHAT_PASS = 0.75  # gold rubric score that counts as a pass
SWE_TERMS = ("similarity", "reward")  # swe/<mode>/<term> beside the executed pass@1
EVAL_TOP_P = 0.95


def examples_for(domain: str, split: str, n: int, seed: int = 0) -> list[tasks_base.Example]:
    """`n` examples spread evenly over the split's difficulty levels (deterministic)."""
    levels = tasks_registry.difficulty_levels(domain, split)
    counts = [n // len(levels) + (i < n % len(levels)) for i in range(len(levels))]
    out: list[tasks_base.Example] = []
    for level, count in zip(levels, counts, strict=True):
        if count:
            out += tasks_registry.generate(domain, split, count, seed=seed, difficulty=level)
    return out


def _chunks(order: list[int], batch_size: int) -> list[list[int]]:
    """Near-equal consecutive chunks of at most `batch_size` (same batch bucket)."""
    num = max(1, math.ceil(len(order) / batch_size))
    size = math.ceil(len(order) / num)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _run(
    params, model_cfg, tok, rows, prompts, *, method, max_new_tokens, batch_size, rng, mesh, rules
):
    """Generated ids (trimmed), lengths and truncation for every row, in row order."""
    order = sorted(range(len(rows)), key=lambda i: len(prompts[i]))
    ids: list[Any] = [None] * len(rows)
    lengths = np.zeros(len(rows), np.int32)
    truncated = np.zeros(len(rows), bool)
    for c, chunk in enumerate(_chunks(order, batch_size)):
        out = decoding.generate(
            params,
            model_cfg,
            [prompts[i] for i in chunk],
            method=method,
            max_new_tokens=max_new_tokens,
            rng=jax.random.fold_in(rng, c),
            pad_id=tok.pad_id,
            mesh=mesh,
            rules=rules,
            **modes_lib.sampler_kwargs([rows[i] for i in chunk]),
        )
        for j, i in enumerate(chunk):
            ids[i] = out.completion_tokens[j, : out.lengths[j]]
            lengths[i], truncated[i] = out.lengths[j], out.truncated[j]
    return ids, lengths, truncated


def _scores(rows, examples, ids) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Gold verifier score of each row's completion (chat: the gold rubric value).

    Also per row, the swe patches' execution-free terms (NaN on other rows):
    `similarity` (lexical, unparsable 0) and `reward` (C1's: -1 / 0 / similarity).
    """
    completions = [m.parser(x)["completion"] for m, x in zip(rows, ids, strict=True)]
    names = [rewards_registry.name_for_domain(ex.domain) for ex in examples]
    results = pool_lib.VerifierPool(num_workers=0).score(
        names, [ex.prompt for ex in examples], completions, list(examples)
    )
    extra = {k: [r.info.get(k, np.nan) for r in results] for k in SWE_TERMS}
    return np.asarray([r.score for r in results], np.float64), {
        k: np.asarray(v, np.float64) for k, v in extra.items()
    }


def evaluate(
    params: Any,
    model_cfg: presets.ModelConfig,
    tok: tokenizer_lib.Tokenizer,
    *,
    domains: Sequence[str],
    modes: Sequence[str],
    num_per_domain: int,
    max_new_tokens: int,
    thinking_budget: int | None,
    batch_size: int,
    split: str = "eval",
    seed: int = 0,
    template: chat_template.Template = chat_template.DEFAULT,
    mesh: jax.sharding.Mesh | None = None,
    rules: rules_lib.Rules | None = None,
    samples: int = 0,
    temperature: float = 0.6,
    answer_budget: int | None = None,
) -> dict[str, float]:
    """Flat `{"<domain>/<mode>/<metric>": value}` (see the module docstring)."""
    if num_per_domain <= 0 or batch_size <= 0 or samples < 0:
        raise ValueError(
            f"need num_per_domain > 0, batch_size > 0, samples >= 0; got "
            f"{num_per_domain}, {batch_size}, {samples}"
        )
    by_mode = {m: modes_lib.get(m, tok, template, thinking_budget, answer_budget) for m in modes}
    cells, rows, examples = [], [], []
    for domain in domains:
        drawn = examples_for(domain, split, num_per_domain, seed)
        for mode in modes:
            cells += [(domain, mode)] * len(drawn)
            rows += [by_mode[mode]] * len(drawn)
            examples += drawn
    prompts = [m.example_prompt(tok, ex) for m, ex in zip(rows, examples, strict=True)]
    kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, mesh=mesh, rules=rules)
    rng = jax.random.key(seed)
    ids, lengths, truncated = _run(
        params, model_cfg, tok, rows, prompts, method=sampling_methods.Greedy(), rng=rng, **kw
    )
    greedy, swe_terms = _scores(rows, examples, ids)
    sampled = None
    if samples:
        rep = np.repeat(np.arange(len(rows)), samples)
        method = sampling_methods.Sample(temperature=temperature, top_p=EVAL_TOP_P)
        s_ids, _, _ = _run(
            params,
            model_cfg,
            tok,
            [rows[i] for i in rep],
            [prompts[i] for i in rep],
            method=method,
            rng=jax.random.fold_in(rng, 1),
            **kw,
        )
        sampled, _ = _scores([rows[i] for i in rep], [examples[i] for i in rep], s_ids)
        sampled = sampled.reshape(len(rows), samples).mean(-1)

    metrics: dict[str, float] = {}
    cell_of = np.asarray([f"{d}/{m}" for d, m in cells])
    for domain in domains:
        for mode in modes:
            key = f"{domain}/{mode}"
            sel = cell_of == key
            if domain == "chat":
                metrics[f"{key}/gold"] = float(greedy[sel].mean())
                metrics[f"{key}/pass@1"] = float((greedy[sel] >= CHAT_PASS).mean())
            else:
                metrics[f"{key}/pass@1"] = float(greedy[sel].mean())
            if domain == "swe":
                metrics.update({f"{key}/{k}": float(v[sel].mean()) for k, v in swe_terms.items()})
            metrics[f"{key}/mean_len"] = float(lengths[sel].mean())
            metrics[f"{key}/truncated"] = float(truncated[sel].mean())
            if sampled is not None:
                metrics[f"{key}/mean@{samples}"] = float(sampled[sel].mean())
    return metrics


def write(path: str, stage: str, metrics: dict[str, float]) -> None:
    """Writes `{"stage": stage, "metrics": metrics}` as JSON (directories created)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"stage": stage, "metrics": metrics}, f, indent=1, sort_keys=True)
