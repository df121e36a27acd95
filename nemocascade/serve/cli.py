"""Flags, model loading and the uvicorn server behind `python -m nemocascade.serve`.

    python -m nemocascade.serve --workdir=/tmp/nc [--stage=stage2_medium] [--port=8000]
    python -m nemocascade.serve --workdir=/ckpt/qwen3_8b      # a converted checkpoint

Loads params, tokenizer and chat template as `generate` does (the stage that
finished last unless `--stage`; a directory holding `export/` is served
itself), then serves them on `--host:--port` until interrupted. Thinking
budgets per `reasoning_effort` come from `--budget_low/medium/high`
(-1 = unlimited); requests without an effort use `--default_effort`.
`--warmup_prompt_tokens=N` compiles the decode ahead for prompts up to N
tokens at every batch bucket (default sampling and `--max_tokens`); other
shapes compile on first use (seconds each on CPU). `--engine=continuous`
(default) decodes each batch in up to `--max_batch` slots refilled every
`--chunk_steps` steps, from its own rows and from requests that arrive
meanwhile, answers a request as soon as its rows finish and streams tokens
every `--chunk_steps` steps; `--engine=static` decodes a batch to its
longest row.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from nemocascade import generate
from nemocascade.data import chat_template, jinja_template, text
from nemocascade.serve import app as app_lib, engine as engine_lib, protocol

SERVE_CHUNK_STEPS = 8  # chosen with bench/serve_load.py (docs/benchmarks.md, "Serving load")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m nemocascade.serve", description=__doc__.split("\n")[0]
    )
    p.add_argument("--workdir", required=True, help="Run directory, or a converted checkpoint.")
    p.add_argument("--stage", default=None, help="Stage to serve (default: last finished).")
    p.add_argument("--preset", default=None, help="Model preset (default: from the checkpoint).")
    p.add_argument("--served_model_name", default="", help="`model` id (default: the stage name).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tokenizer", default="", help="'builtin' or a tokenizer.json dir.")
    p.add_argument("--chat_template", default="", help="'builtin' or a .jinja file.")
    p.add_argument("--mode_switch", choices=jinja_template.MODE_SWITCHES, default="enable_thinking")
    p.add_argument("--template_style", choices=chat_template.STYLES, default="c1")
    p.add_argument("--budget_low", type=int, default=64, help="Thinking tokens at effort low.")
    p.add_argument("--budget_medium", type=int, default=256)
    p.add_argument("--budget_high", type=int, default=-1, help="-1 = unlimited.")
    p.add_argument("--default_effort", choices=protocol.EFFORTS, default="high")
    p.add_argument("--temperature", type=float, default=0.6, help="Default; 0 = greedy.")
    p.add_argument("--top_p", type=float, default=0.95)
    p.add_argument("--top_k", type=int, default=20, help="0 = no top-k truncation.")
    p.add_argument("--max_tokens", type=int, default=256, help="Default completion length.")
    p.add_argument(
        "--max_batch", type=int, default=64, help="Rows per sampler call (decode slots)."
    )
    p.add_argument(
        "--engine",
        choices=engine_lib.ENGINES,
        default="continuous",
        help="continuous: slots refilled as rows finish; static: one batch per call.",
    )
    # Serving refills slots more often than RL rollouts (continuous.DEFAULT_CHUNK_STEPS):
    # a request joins, and a streamed delta leaves, at a chunk boundary.
    p.add_argument(
        "--chunk_steps", type=int, default=SERVE_CHUNK_STEPS, help="Decode steps between refills."
    )
    p.add_argument("--max_queue", type=int, default=256, help="Admitted requests; more get 503.")
    p.add_argument(
        "--batch_wait_ms", type=float, default=20.0, help="Gap that ends a batch's collection."
    )
    p.add_argument(
        "--warmup_prompt_tokens",
        type=int,
        default=0,
        help="Compile at start for prompts up to this length (all batch buckets, default "
        "sampling); 0 = compile on first use.",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _budget(name: str, value: int) -> int | None:
    if value < -1:
        raise generate.UsageError(f"--{name} must be >= 0 or -1 (unlimited), got {value}")
    return None if value == -1 else value


def load(args: argparse.Namespace) -> tuple[app_lib.Model, engine_lib.Engine]:
    """The served model and its engine, from the flags."""
    budgets = {
        e: _budget(f"budget_{e}", getattr(args, f"budget_{e}")) for e in ("low", "medium", "high")
    }
    if args.chunk_steps <= 0:
        raise generate.UsageError(f"--chunk_steps must be > 0, got {args.chunk_steps}")
    if args.max_tokens <= 0:
        raise generate.UsageError(f"--max_tokens must be > 0, got {args.max_tokens}")
    generate.method_from(args.temperature, args.top_p, args.top_k)  # checks the defaults
    params, cfg, mesh, rules, stage_dir = generate.load(args.workdir, args.stage, args.preset)
    try:
        tok, template, _ = text.load(
            stage_dir,
            cfg,
            ("instruct", "thinking"),
            tokenizer=args.tokenizer,
            chat_template=args.chat_template,
            style=args.template_style,
            mode_switch=args.mode_switch,
        )
    except text.TextError as e:
        raise generate.UsageError(str(e).replace("config.data.", "--")) from None
    model = app_lib.Model(
        name=args.served_model_name or os.path.basename(stage_dir.rstrip("/")),
        tok=tok,
        template=template,
        max_seq_len=cfg.max_seq_len,
        budgets=budgets,
        defaults={
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "effort": args.default_effort,
            "max_tokens": args.max_tokens,
        },
    )
    engine = engine_lib.Engine(
        engine_lib.sampler_fn(
            params,
            cfg,
            tok.pad_id,
            mesh,
            rules,
            engine=args.engine,
            num_slots=args.max_batch,
            chunk_steps=args.chunk_steps,
        ),
        cfg.max_seq_len,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        batch_wait_s=args.batch_wait_ms / 1000,
        seed=args.seed,
    )
    if args.warmup_prompt_tokens > 0:
        t0 = time.perf_counter()
        calls = engine.warmup(
            model.mode(args.default_effort),
            generate.method_from(args.temperature, args.top_p, args.top_k),
            args.max_tokens,
            args.warmup_prompt_tokens,
        )
        print(
            f"compiled {calls} decode shapes in {time.perf_counter() - t0:.1f} s", file=sys.stderr
        )
    return model, engine


def main(argv: Sequence[str] | None = None) -> None:
    import uvicorn

    args = parse_args(argv)
    try:
        model, engine = load(args)
    except generate.UsageError as e:
        sys.exit(f"serve: {e}")
    print(f"serving {model.name!r} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    try:
        uvicorn.run(
            app_lib.build_app(model, engine), host=args.host, port=args.port, log_level="warning"
        )
    finally:
        engine.close()
