"""CLI: a checkpoint on benchmark suites; prints a table and writes `eval_matrix.json`.

    python -m nemocascade.evaluate --workdir=RUN [--stage=code_rl] \\
        --suite=humaneval --suite=ifbench --suite=math500:/data/math500.jsonl \\
        --modes=thinking,instruct --n=4 --k=1,4
    python -m nemocascade.evaluate --suite=humaneval --completions_from=reference \\
        --output=/tmp/he/eval_matrix.json        # 164/164 through the code verifier

Suites are listed in `nemocascade/evaluation/suites.py`. Each prompt is
sampled `--n` times per mode (temperature 0 = greedy); every sample is
scored by its domain's verifier in the verifier pool. Keys, per suite s and
mode m (`eval.suites=` and the report read them like the stage eval matrix):

* `s/m/pass@1`: mean fraction of correct samples per prompt;
* `s/m/pass@k` for each `--k` in (1, n]: the unbiased estimator of Chen et
  al. (2021), 1 - C(n-c, k) / C(n, k), averaged over prompts;
* `s/m/mean_len`: mean generated tokens; `s/m/truncated`: fraction without a stop;
* `s/m/{prompt,inst}_level_{strict,loose}_acc` for IFEval/IFBench suites:
  IFEval's four accuracies over all samples (prompt-level strict = pass@1).

`--completions_from=reference` (or `reference_truncated`: the last line of
each reference program dropped) scores the suite's own reference answers
instead of sampling, under that name as the mode, to check the suite and its
verifier without a model. The matrix goes to `--output` (default: the stage's
`eval_matrix.json`, whose other keys are kept).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence

import numpy as np
from absl import app, flags

from nemocascade.evaluation import matrix, suites as suites_lib
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


def _text_for(stage_dir: str, model_cfg, modes: Sequence[str]):
    """(tokenizer, chat template) of a checkpoint dir — the one place evaluate gets them."""
    from nemocascade import config as config_lib
    from nemocascade.data import text

    try:
        tok, source = text.load_tokenizer("", stage_dir)
        template = text.load_template("", source, tok=tok)
        text.check_model(tok, template, model_cfg, tuple(modes))
    except config_lib.ConfigError as e:
        raise suites_lib.SuiteError(f"--workdir={stage_dir}: {e}") from None
    return tok, template


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


def _messages(example: tasks_base.Example) -> list[dict]:
    return example.meta.get("messages") or [{"role": "user", "content": example.prompt}]


def _sample(
    opts: Options, examples, mode_name: str, loaded
) -> tuple[list[str], np.ndarray, np.ndarray]:
    from nemocascade import generate
    from nemocascade.rollout import modes as modes_lib

    cfg, tok = loaded.model_cfg, loaded.tok
    mode = modes_lib.get(mode_name, tok, loaded.template, opts.thinking_budget)
    rows = [{"prompt": ex.prompt, "messages": _messages(ex)} for ex in examples]
    longest = max(len(mode.prompt(tok, r["messages"])) for r in rows)
    if longest + opts.max_new_tokens > cfg.max_seq_len:
        raise suites_lib.SuiteError(
            f"--max_new_tokens={opts.max_new_tokens} + longest prompt ({longest} tokens) "
            f"exceeds the model's max_seq_len={cfg.max_seq_len}"
        )
    out = generate.complete(
        loaded.params,
        cfg,
        tok,
        [r for r in rows for _ in range(opts.n)],
        mode,
        method=generate.method_from(opts.temperature, opts.top_p, opts.top_k),
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


def _check(opts: Options) -> None:
    if not opts.suites:
        raise suites_lib.SuiteError("pass at least one --suite")
    if opts.completions_from not in SOURCES:
        raise suites_lib.SuiteError(f"--completions_from must be one of {SOURCES}")
    if opts.n < 1 or any(k < 1 for k in opts.k) or opts.batch_size < 1 or opts.limit < 0:
        raise suites_lib.SuiteError(
            "need --n >= 1, every --k >= 1, --batch_size >= 1, --limit >= 0"
        )
    if opts.completions_from == "model" and not opts.workdir:
        raise suites_lib.SuiteError(
            "--workdir is needed to sample (or --completions_from=reference)"
        )


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


def run(opts: Options) -> dict[str, float]:
    """Evaluates, writes the matrix, prints the table; returns the new metrics."""
    _check(opts)
    loaded, stage_dir = None, ""
    if opts.completions_from == "model":
        from nemocascade import generate

        params, cfg, mesh, rules, stage_dir = generate.load(
            opts.workdir, opts.stage or None, opts.preset or None
        )
        loaded = Loaded(params, cfg, mesh, rules, *_text_for(stage_dir, cfg, opts.modes))
    metrics, table = score_suites(opts, loaded)
    output = opts.output or os.path.join(stage_dir or ".", "eval_matrix.json")
    _write(output, os.path.basename(stage_dir) or opts.completions_from, metrics)
    print(format_table(table))
    print(f"wrote {len(metrics)} metrics to {output}")
    return metrics


def _write(path: str, stage: str, metrics: dict[str, float]) -> None:
    merged = {}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        merged, stage = old.get("metrics", {}), old.get("stage", stage)
    matrix.write(path, stage, {**merged, **metrics})


def format_table(rows) -> str:
    lines = [f"{'suite':<16} {'mode':<20} {'prompts':>7} {'passed':>11}  metrics"]
    for name, mode, prompts, passed, total, values in rows:
        shown = "  ".join(f"{k.rsplit('/', 1)[1]}={v:.4g}" for k, v in values.items())
        lines.append(f"{name:<16} {mode:<20} {prompts:>7} {f'{passed}/{total}':>11}  {shown}")
    return "\n".join(lines)


def define_flags() -> None:
    """The CLI's flags, defined only when run as a program (importing defines none)."""
    flags.DEFINE_string("workdir", "", "Run dir (stage exports) or a converted checkpoint dir.")
    flags.DEFINE_string("stage", "", "Stage to load (default: the policy stage finished last).")
    flags.DEFINE_string("preset", "", "Model preset (default: from the checkpoint).")
    flags.DEFINE_multi_string("suite", [], "Built-in name or KIND:PATH (repeatable).")
    flags.DEFINE_list("modes", ["thinking", "instruct"], "Decoding modes.")
    flags.DEFINE_integer("n", 1, "Samples per prompt.")
    flags.DEFINE_list("k", ["1"], "pass@k values reported (k <= n).")
    flags.DEFINE_float("temperature", 0.6, "0 = greedy.")
    flags.DEFINE_float("top_p", 0.95, "Nucleus sampling.")
    flags.DEFINE_integer("top_k", 20, "0 = no top-k.")
    flags.DEFINE_integer("max_new_tokens", 1024, "Generated tokens per sample.")
    flags.DEFINE_integer("thinking_budget", None, "Thinking tokens before </think> is forced.")
    flags.DEFINE_integer("batch_size", 64, "Rows per sampler call.")
    flags.DEFINE_integer("limit", 0, "Prompts per suite (0 = all).")
    flags.DEFINE_integer("world_n", 64, "Task-world suites: eval prompts per domain.")
    flags.DEFINE_enum("completions_from", "model", SOURCES, "Sample, or score reference answers.")
    flags.DEFINE_string("output", "", "eval_matrix.json path (default: the stage's).")
    flags.DEFINE_integer("verifier_workers", 2, "Verifier pool processes.")
    flags.DEFINE_float("verifier_timeout_s", 30.0, "Per-sample verifier timeout.")
    flags.DEFINE_integer("seed", 0, "Sampling seed.")
    flags.DEFINE_enum("sandbox_backend", "bwrap", ("bwrap", "rlimit"), "Code suites' sandbox.")


def main(argv: Sequence[str]) -> None:
    del argv
    f = flags.FLAGS
    opts = Options(
        suites=tuple(f.suite),
        workdir=f.workdir,
        stage=f.stage,
        preset=f.preset,
        modes=tuple(f.modes),
        n=f.n,
        k=tuple(int(k) for k in f.k),
        temperature=f.temperature,
        top_p=f.top_p,
        top_k=f.top_k,
        max_new_tokens=f.max_new_tokens,
        thinking_budget=f.thinking_budget,
        batch_size=f.batch_size,
        limit=f.limit,
        world_n=f.world_n,
        completions_from=f.completions_from,
        output=f.output,
        verifier_workers=f.verifier_workers,
        verifier_timeout_s=f.verifier_timeout_s,
        seed=f.seed,
        sandbox_backend=f.sandbox_backend,
    )
    from nemocascade import generate

    try:
        run(opts)
    except (suites_lib.SuiteError, generate.UsageError) as e:
        raise app.UsageError(str(e)) from None


if __name__ == "__main__":
    define_flags()
    app.run(main)
