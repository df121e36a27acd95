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

import json
import os
from collections.abc import Sequence

from absl import app, flags

from nemocascade.evaluation import benchmarks, matrix, suites as suites_lib
from nemocascade.evaluation.benchmarks import SOURCES, Loaded, Options


def _text_for(stage_dir: str, model_cfg, modes: Sequence[str]):
    """(tokenizer, chat template) of a checkpoint dir — the one place evaluate gets them."""
    from nemocascade.data import text

    try:
        tok, template, _ = text.load(stage_dir, model_cfg, modes)
    except text.TextError as e:
        raise suites_lib.SuiteError(f"--workdir={stage_dir}: {e}") from None
    return tok, template


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
    metrics, table = benchmarks.score_suites(opts, loaded)
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
