"""Benchmark suites scored on a policy: n samples per prompt, pass@1 and pass@k, IFEval figures.

The library behind `python -m nemocascade.evaluate` and the stage evals
(`config.eval.suites`, the forgetting guard): `score_suites(options, loaded)`
samples each suite's prompts in each mode (or takes its reference answers),
scores every sample with its domain's verifier in the verifier pool and
returns `<suite>/<mode>/<metric>` values (the metrics are listed in
`nemocascade/evaluate.py`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from nemocascade.data import chat_template
from nemocascade.evaluation import suites as suites_lib
from nemocascade.rewards import pool as pool_lib, registry
from nemocascade.tasks import base as tasks_base

SOURCES = ("model", "reference", "reference_truncated")


@dataclasses.dataclass(frozen=True)
class Options:
    suites: tuple[str, ...]
    workdir: str = ""
    stage: str = ""
    preset: str = ""
    modes: tuple[str, ...] = ("thinking", "instruct")
    n: int = 1
    k: tuple[int, ...] = (1,)
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 1024
    thinking_budget: int | None = None
    batch_size: int = 64
    limit: int = 0  # prompts per suite; 0 = all
    world_n: int = 64  # task-world suites: eval prompts per domain
    completions_from: str = "model"
    output: str = ""
    verifier_workers: int = 2
    verifier_timeout_s: float = 30.0
    seed: int = 0
    skip_domains: tuple[str, ...] = ()  # suites whose prompts are all of these are skipped
    sandbox_backend: str = "bwrap"  # where code suites run (docs/security.md)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def reference_completion(example: tasks_base.Example, truncated: bool) -> str:
    """The example's reference answer; `truncated` drops its last (code) line."""
    if not example.answer:
        raise suites_lib.SuiteError(f"{example.uid}: the suite has no reference answers")
    if not truncated:
        return example.answer
    lines = example.answer.rstrip().split("\n")
    fence = lines[-1] if lines[-1].startswith("```") else None
    body = lines[:-1] if fence else lines
    while body and not body[-1].strip():
        body.pop()
    return "\n".join(body[:-1] + ([fence] if fence else []))


def _sample(
    opts: Options, examples, mode_name: str, loaded
) -> tuple[list[str], np.ndarray, np.ndarray]:
    from nemocascade.rollout import completions, modes as modes_lib

    cfg, tok = loaded.model_cfg, loaded.tok
    mode = modes_lib.get(mode_name, tok, loaded.template, opts.thinking_budget)
    rows = [
        {"prompt": ex.prompt, "messages": chat_template.example_messages(ex)} for ex in examples
    ]
    longest = max(len(mode.prompt(tok, r["messages"])) for r in rows)
    if longest + opts.max_new_tokens > cfg.max_seq_len:
        raise suites_lib.SuiteError(
            f"--max_new_tokens={opts.max_new_tokens} + longest prompt ({longest} tokens) "
            f"exceeds the model's max_seq_len={cfg.max_seq_len}"
        )
    out = completions.complete(
        loaded.params,
        cfg,
        tok,
        [r for r in rows for _ in range(opts.n)],
        mode,
        method=completions.method_from(opts.temperature, opts.top_p, opts.top_k),
        max_new_tokens=opts.max_new_tokens,
        batch_size=opts.batch_size,
        seed=opts.seed,
        mesh=loaded.mesh,
        rules=loaded.rules,
    )
    lengths = np.asarray([o["num_tokens"] for o in out], np.float64)
    return [o["completion"] for o in out], lengths, np.asarray([o["truncated"] for o in out])


def _score(opts: Options, examples, completions: list[str], n: int):
    rows = [ex for ex in examples for _ in range(n)]
    names = [registry.name_for_domain(ex.domain) for ex in rows]
    with pool_lib.VerifierPool(opts.verifier_workers, opts.verifier_timeout_s) as pool:
        return pool.score(names, [ex.prompt for ex in rows], completions, rows)


def suite_metrics(prefix: str, results, n: int, ks: Sequence[int], lengths=None, truncated=None):
    """`prefix/metric` values from n results per prompt (prompt-major order)."""
    correct = np.asarray([r.score >= 1.0 for r in results]).reshape(-1, n).sum(-1)
    out = {f"{prefix}/pass@1": float(np.mean(correct / n))}
    for k in sorted(set(ks)):
        if 1 < k <= n:
            out[f"{prefix}/pass@{k}"] = float(np.mean([pass_at_k(n, int(c), k) for c in correct]))
    if lengths is not None:
        out[f"{prefix}/mean_len"] = float(lengths.mean())
        out[f"{prefix}/truncated"] = float(truncated.mean())
    return out, int(correct.sum())


def if_figures(prefix: str, examples, completions: list[str], n: int) -> dict[str, float]:
    """IFEval's four accuracies over every sample of the suite's IFEval/IFBench prompts."""
    from nemocascade.rewards import base
    from nemocascade.rewards.ifeval import scoring

    pairs = []
    for i, ex in enumerate(examples):
        ids = ex.meta.get("instruction_id_list")
        if ex.domain != "if" or not ids:
            continue
        for completion in completions[i * n : (i + 1) * n]:
            _, answer = base.split_thinking(completion)
            if answer is None:  # unfinished thinking follows nothing
                pairs.append(([False] * len(ids), [False] * len(ids)))
                continue
            args = (answer, ids, ex.meta["kwargs"], ex.prompt)
            pairs.append((scoring.follows(*args), scoring.follows(*args, loose=True)))
    if not pairs:
        return {}
    return {f"{prefix}/{k}": v for k, v in scoring.accuracy(pairs).items()}


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A policy ready to sample: what `generate.load` and `_text_for` give."""

    params: object
    model_cfg: object
    mesh: object
    rules: object
    tok: object
    template: object


def _code_sandbox(backend: str) -> None:
    """Fails closed before a code suite runs without its sandbox (never a silent 0)."""
    from nemocascade.rewards import sandbox

    try:
        sandbox.configure(backend, needed=True)
    except sandbox.SandboxUnavailable as e:
        raise suites_lib.SuiteError(f"--sandbox_backend={backend}: {e}") from None


def score_suites(opts: Options, loaded: Loaded | None = None):
    """(metrics, table rows) of every suite; samples from `loaded` unless reference mode.

    Importable for in-training use: a stage that holds its params, tokenizer and
    template passes them as `Loaded` and gets the same keys as the CLI.
    """
    if opts.completions_from == "model" and loaded is None:
        raise suites_lib.SuiteError("sampling needs a loaded model")
    metrics: dict[str, float] = {}
    table = []
    for spec in opts.suites:
        suite = suites_lib.load(spec, world_n=opts.world_n, seed=opts.seed)
        if {ex.domain for ex in suite.examples} <= set(opts.skip_domains):
            continue
        examples = suite.examples[: opts.limit or None]
        if any(ex.domain == "code" for ex in examples):
            _code_sandbox(opts.sandbox_backend)
        if opts.completions_from == "model":
            runs = [(m, opts.n, *_sample(opts, examples, m, loaded)) for m in opts.modes]
        else:
            truncated = opts.completions_from == "reference_truncated"
            completions = [reference_completion(ex, truncated) for ex in examples]
            runs = [(opts.completions_from, 1, completions, None, None)]
        for mode, n, completions, lengths, trunc in runs:
            results = _score(opts, examples, completions, n)
            prefix = f"{suite.name}/{mode}"
            values, passed = suite_metrics(prefix, results, n, opts.k, lengths, trunc)
            values.update(if_figures(prefix, examples, completions, n))
            metrics.update(values)
            table.append((suite.name, mode, len(examples), passed, n * len(examples), values))
        if suite.skipped:
            print(f"{suite.name}: {suite.skipped} left out ({suite.note})")
    return metrics, table


def stage_cells(cfg, tok, template, mesh, rules, params, skip_domains=()) -> dict[str, float]:
    """`config.eval.suites` scored greedily with the `config.eval` settings (stage evals).

    `num_per_domain` prompts per suite; suites whose prompts all belong to
    `skip_domains` are left out (the forgetting guard skips the trained domains).
    """
    e = cfg.eval
    opts = Options(
        suites=e.suites,
        modes=e.modes,
        temperature=0.0,
        max_new_tokens=e.max_new_tokens,
        thinking_budget=e.thinking_budget,
        batch_size=e.batch_size,
        limit=e.num_per_domain,
        world_n=e.num_per_domain,
        verifier_workers=cfg.rl.verifier_workers,
        verifier_timeout_s=cfg.rl.verifier_timeout_s,
        skip_domains=tuple(skip_domains),
        sandbox_backend=cfg.sandbox.backend,
    )
    if not opts.suites:
        return {}
    loaded = Loaded(params, cfg.model, mesh, rules, tok, template)
    return score_suites(opts, loaded)[0]
