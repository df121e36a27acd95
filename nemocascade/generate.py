"""CLI: sample from a stage's exported params in either decoding mode.

    python -m nemocascade.generate --workdir=DIR --mode=thinking --prompt="What is 2+3?"
    python -m nemocascade.generate --workdir=DIR --stage=sft --mode=instruct \\
        --input=prompts.jsonl --output=out.jsonl

Input lines are JSON objects with `prompt` and optionally `messages` (a chat
ending with a user turn, which then replaces `prompt`); every output line is
the input object plus `completion`, `thinking`, `answer`, `num_tokens`,
`token_ids` (the generated ids, stop token included) and
`truncated`. Params come from `DIR/<stage>/export`; `--stage` defaults to the
policy stage that finished last. The model shape is read from the checkpoint
and matched against the presets (`--preset` names one explicitly). Sampling
defaults follow the paper's evaluation (temperature 0.6, top-p 0.95, top-k
20); `--temperature=0` decodes greedily.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence

import flax.linen as nn
import jax
import orbax.checkpoint as ocp
from absl import flags

from nemocascade import checkpointing, cli, config as config_lib
from nemocascade.data import chat_template, jinja_template, text
from nemocascade.model import presets, transformer
from nemocascade.rollout import completions, modes as modes_lib, sampling_methods
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import state as state_lib

# Stages whose export is not a policy (the reward model has its own head).
_NOT_POLICY = ("rm",)


UsageError = cli.UsageError


def resolve_stage(workdir: str, stage: str | None) -> str:
    """`stage` checked, or the policy stage whose DONE marker is newest."""
    if not os.path.isdir(workdir):
        raise UsageError(f"--workdir={workdir} does not exist")
    if stage:
        if not os.path.isdir(os.path.join(workdir, stage, "export")):
            raise UsageError(f"--stage={stage}: no exported params at {workdir}/{stage}/export")
        return stage
    done = [
        name
        for name in os.listdir(workdir)
        if name not in _NOT_POLICY and checkpointing.is_done(os.path.join(workdir, name))
    ]
    if not done:
        raise UsageError(f"--workdir={workdir} has no finished stage; pass --stage=NAME")
    return max(done, key=lambda n: os.path.getmtime(os.path.join(workdir, n, "DONE")))


def infer_model_config(params_dir: str, preset: str | None = None) -> presets.ModelConfig:
    """The model shape of an exported params tree: a matching preset, else built from shapes.

    Unmatched shapes get `ModelConfig` defaults for what shapes cannot tell
    (rope theta, dtypes, max_seq_len).
    """
    tree = ocp.StandardCheckpointer().metadata(params_dir).item_metadata
    scanned = "layers" in tree
    layer = tree["layers"] if scanned else tree["layer_0"]
    q_shape = layer["attn"]["q_proj"]["kernel"].shape
    vocab, d_model = tree["embed"]["embedding"].shape
    shape = dict(
        vocab_size=vocab,
        d_model=d_model,
        num_layers=q_shape[0] if scanned else sum(k.startswith("layer_") for k in tree),
        num_heads=q_shape[-2],
        num_kv_heads=layer["attn"]["k_proj"]["kernel"].shape[-2],
        head_dim=q_shape[-1],
        d_ff=layer["mlp"]["gate_proj"]["kernel"].shape[-1],
        qk_norm="q_norm" in layer["attn"],
        tie_embeddings="lm_head" not in tree,
    )
    if preset:
        cfg = presets.get_preset(preset)
        wrong = {k: (getattr(cfg, k), v) for k, v in shape.items() if getattr(cfg, k) != v}
        if wrong:
            raise UsageError(
                f"--preset={preset} does not match the checkpoint (preset, ckpt): {wrong}"
            )
        return dataclasses.replace(cfg, scan_layers=scanned)
    for cfg in presets.PRESETS.values():
        if all(getattr(cfg, k) == v for k, v in shape.items()):
            return dataclasses.replace(cfg, scan_layers=scanned)
    return presets.ModelConfig(**shape, scan_layers=scanned)


def stage_dir_of(workdir: str, stage: str | None) -> str:
    """The stage directory: `workdir` itself when it holds an export (a converted checkpoint)."""
    if not stage and os.path.isdir(os.path.join(workdir, "export")):
        return os.path.abspath(workdir)
    return os.path.join(os.path.abspath(workdir), resolve_stage(workdir, stage))


def model_config(params_dir: str, stage_dir: str, preset: str | None) -> presets.ModelConfig:
    """`--preset`, else the stage's `model_config.json` (exact), else inferred from shapes."""
    if not preset:
        try:
            return config_lib.checkpoint_model(stage_dir)
        except ValueError:
            pass
    return infer_model_config(params_dir, preset)


def load(workdir: str, stage: str | None, preset: str | None = None):
    """(params on a decode mesh, model config, mesh, rules, stage directory)."""
    stage_dir = stage_dir_of(workdir, stage)
    params_dir = checkpointing.resolve_params_dir(stage_dir)
    cfg = model_config(params_dir, stage_dir, preset)
    mesh = mesh_lib.make_mesh((1, -1, 1))
    rules = rules_lib.get_rules("decode")
    shardings = state_lib.param_shardings(cfg, mesh, rules)
    shapes = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    abstract = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
    )
    return checkpointing.load_params(params_dir, abstract), cfg, mesh, rules, stage_dir


def method_from(temperature: float, top_p: float, top_k: int) -> sampling_methods.Method:
    try:
        return completions.method_from(temperature, top_p, top_k)
    except ValueError as e:
        raise UsageError(f"--temperature/--top_p/--top_k: {e}") from None


def read_records(path: str) -> list[dict]:
    if not os.path.exists(path):
        raise UsageError(f"--input={path} does not exist")
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for i, r in enumerate(records):
        if "prompt" not in r and "messages" not in r:
            raise UsageError(f"--input={path}: line {i + 1} has neither 'prompt' nor 'messages'")
    return records


complete = completions.complete  # the library function; generate is its command line


def define_flags(fv: flags.FlagValues) -> None:
    on = {"flag_values": fv}
    flags.DEFINE_string("workdir", None, "Run directory holding <stage>/export.", **on)
    flags.DEFINE_string("stage", None, "Stage to load (default: last finished).", **on)
    flags.DEFINE_string("preset", None, "Model preset (default: from the checkpoint).", **on)
    flags.DEFINE_enum("mode", "thinking", modes_lib.NAMES, "Decoding mode.", **on)
    flags.DEFINE_string(
        "tokenizer", "", "'builtin' or a tokenizer.json dir (default: the stage's).", **on
    )
    flags.DEFINE_string(
        "chat_template", "", "'builtin' or a .jinja file (default: the model's).", **on
    )
    flags.DEFINE_enum(
        "mode_switch",
        "enable_thinking",
        jinja_template.MODE_SWITCHES,
        "How a Jinja template learns the mode.",
        **on,
    )
    flags.DEFINE_enum("template_style", "c1", chat_template.STYLES, "Built-in layout.", **on)
    flags.DEFINE_string("prompt", None, "One prompt; the completion goes to stdout.", **on)
    flags.DEFINE_string("input", None, "JSONL of {'prompt'|'messages': ...}.", **on)
    flags.DEFINE_string("output", None, "JSONL written with completions.", **on)
    flags.DEFINE_float("temperature", 0.6, "0 = greedy.", **on)
    flags.DEFINE_float("top_p", 0.95, "Nucleus sampling mass.", **on)
    flags.DEFINE_integer("top_k", 20, "0 = no top-k truncation.", **on)
    flags.DEFINE_integer("max_new_tokens", 256, "Generated tokens per prompt.", **on)
    flags.DEFINE_integer(
        "thinking_budget", None, "Thinking tokens before </think> is forced.", **on
    )
    flags.DEFINE_integer("batch_size", 64, "Prompts per sampler call.", **on)
    flags.DEFINE_integer("seed", 0, "Sampling seed.", **on)


def parse_args(argv: Sequence[str] | None):
    """Flags (absl; `--flagfile` works) → a namespace for `run`."""
    return cli.parse("generate", define_flags, argv, required=("workdir",))


def run(args) -> list[dict]:
    """Everything `main` does, importable; returns the output records."""
    if (args.prompt is None) == (args.input is None):
        raise UsageError("pass exactly one of --prompt and --input")
    if args.input is not None and args.output is None:
        raise UsageError("--input needs --output")
    if args.max_new_tokens <= 0 or args.batch_size <= 0:
        raise UsageError("--max_new_tokens and --batch_size must be > 0")
    if args.thinking_budget is not None and args.thinking_budget < 0:
        raise UsageError(f"--thinking_budget must be >= 0, got {args.thinking_budget}")
    method = method_from(args.temperature, args.top_p, args.top_k)
    records = [{"prompt": args.prompt}] if args.prompt is not None else read_records(args.input)
    params, cfg, mesh, rules, stage_dir = load(args.workdir, args.stage, args.preset)
    try:
        tok, template, _ = text.load(
            stage_dir,
            cfg,
            (args.mode,),
            tokenizer=args.tokenizer,
            chat_template=args.chat_template,
            style=args.template_style,
            mode_switch=args.mode_switch,
        )
    except text.TextError as e:
        raise UsageError(str(e).replace("config.data.", "--")) from None
    mode = modes_lib.get(args.mode, tok, template, args.thinking_budget)
    longest = max(len(mode.prompt(tok, completions.messages_of(r))) for r in records)
    if longest + args.max_new_tokens > cfg.max_seq_len:
        raise UsageError(
            f"--max_new_tokens={args.max_new_tokens} + longest prompt ({longest} tokens) "
            f"exceeds the model's max_seq_len={cfg.max_seq_len}"
        )
    out = complete(
        params,
        cfg,
        tok,
        records,
        mode,
        method=method,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        seed=args.seed,
        mesh=mesh,
        rules=rules,
    )
    if args.output is not None:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            for record in out:
                f.write(json.dumps(record) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from nemocascade import errors

    argv, verbose = errors.split_verbose(argv)
    args = cli.exit_on_usage_error("generate", parse_args, argv)
    try:
        with errors.one_line("generate", verbose=verbose, context=f"--workdir={args.workdir}"):
            out = run(args)
    except UsageError as e:
        sys.exit(f"generate: {e}")
    if args.prompt is not None:
        print(out[0]["completion"])
    else:
        print(f"wrote {len(out)} completions to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
