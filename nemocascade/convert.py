"""CLI: Hugging Face ⇄ nemocascade checkpoints (Qwen3 and Llama).

    python -m nemocascade.convert --from_hf=HF_DIR --to=OUT_DIR
    python -m nemocascade.convert --from=WORKDIR_OR_STAGE_DIR --to_hf=HF_DIR [--preset=NAME]

`--from_hf` writes `OUT_DIR/export` (orbax params, sharded over all devices
with the `fsdp` rules), `OUT_DIR/DONE`, `OUT_DIR/model_config.json` and copies
the tokenizer files, so OUT_DIR serves as a finished stage: a config's
`init.init_from=OUT_DIR` starts from it, and `--from=OUT_DIR` converts back.
`--from` takes a stage directory, its `export`, or a workdir (the policy stage
that finished last, or `--stage`); the model shape comes from
`model_config.json` beside the stage (or in the workdir), or from `--preset`,
and is checked against the checkpoint. Multi-host: start one process per host
with `--distributed` (TPU pods / SLURM) or the explicit coordinator flags; each
process reads only the tensor slices its devices hold.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence

import flax.linen as nn
import jax
from absl import flags

from nemocascade import checkpointing, cli, config as config_lib, generate
from nemocascade.model import hf_convert, presets, transformer
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import state as state_lib

MODEL_CONFIG_FILE = config_lib.MODEL_CONFIG_FILE
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_NOT_POLICY = ("rm",)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30})


UsageError = cli.UsageError


def parse_size(text: str) -> int:
    """'5GB' (10^9), '512MiB' (2^20) or a byte count."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS or float(m.group(1)) <= 0:
        raise UsageError(f"--max_shard_size={text!r}: expected e.g. 5GB, 512MiB or a byte count")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _shardings(cfg: presets.ModelConfig):
    mesh = mesh_lib.make_mesh((1, -1, 1))
    return mesh, state_lib.param_shardings(cfg, mesh, rules_lib.get_rules("fsdp"))


def _copy_tokenizer(src_dirs: Sequence[str], dst: str) -> list[str]:
    """Copies the tokenizer files of the first directory that has `tokenizer.json`."""
    for src in src_dirs:
        if os.path.exists(os.path.join(src, TOKENIZER_FILES[0])):
            names = [n for n in TOKENIZER_FILES if os.path.exists(os.path.join(src, n))]
            if jax.process_index() == 0:
                for n in names:
                    shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))
            return names
    return []


def from_hf(hf_dir: str, out_dir: str, overrides: dict) -> presets.ModelConfig:
    """HF directory → `out_dir/{export, DONE, model_config.json, tokenizer files}`."""
    if not os.path.isdir(hf_dir):
        raise UsageError(f"--from_hf={hf_dir} is not a directory")
    try:
        cfg = hf_convert.config_from_hf(hf_dir, **overrides)
        _, shardings = _shardings(cfg)
        params = hf_convert.import_params(hf_dir, cfg, shardings=shardings)
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise UsageError(f"--from_hf={hf_dir}: {e}") from None
    out_dir = os.path.abspath(out_dir)
    checkpointing.export_params(out_dir, params, {"imported_from": os.path.abspath(hf_dir)})
    if jax.process_index() == 0:
        with open(os.path.join(out_dir, MODEL_CONFIG_FILE), "w") as f:
            json.dump(dataclasses.asdict(cfg), f, indent=2)
    _copy_tokenizer([hf_dir], out_dir)
    return cfg


def resolve_source(path: str, stage: str | None) -> tuple[str, str]:
    """(orbax params dir, stage dir) for `--from` = a stage dir, its export, or a workdir."""
    if not os.path.isdir(path):
        raise UsageError(f"--from={path} is not a directory")
    path = os.path.abspath(path)
    if not stage:
        try:
            params_dir = checkpointing.resolve_params_dir(path)
            return params_dir, path if params_dir != path else os.path.dirname(path)
        except FileNotFoundError:
            done = [
                n
                for n in os.listdir(path)
                if n not in _NOT_POLICY and checkpointing.is_done(os.path.join(path, n))
            ]
            if not done:
                raise UsageError(
                    f"--from={path} is neither a stage dir with an export nor a workdir "
                    "with a finished stage"
                ) from None
            stage = max(done, key=lambda n: os.path.getmtime(os.path.join(path, n, "DONE")))
    stage_dir = os.path.join(path, stage)
    try:
        return checkpointing.resolve_params_dir(stage_dir), stage_dir
    except FileNotFoundError:
        raise UsageError(f"--stage={stage}: no exported params under {stage_dir}") from None


def source_config(params_dir: str, stage_dir: str, preset: str | None) -> presets.ModelConfig:
    """The model config of an export: `--preset`, else `model_config.json`, shape-checked."""
    if preset:
        try:
            return generate.infer_model_config(params_dir, preset)
        except (generate.UsageError, ValueError) as e:
            raise UsageError(str(e)) from None
    for d in (stage_dir, os.path.dirname(stage_dir)):
        path = os.path.join(d, MODEL_CONFIG_FILE)
        if os.path.exists(path):
            break
    else:
        raise UsageError(
            f"--from: no {MODEL_CONFIG_FILE} in {stage_dir} or its parent; pass --preset=NAME"
        )
    with open(path) as f:
        fields = json.load(f)
    try:
        cfg = presets.ModelConfig(**fields)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--from: {path} is not a valid model config: {e}") from None
    found = generate.infer_model_config(params_dir)
    shape = ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "head_dim")
    shape += ("d_ff", "qk_norm", "tie_embeddings")
    wrong = {
        k: (getattr(cfg, k), getattr(found, k))
        for k in shape
        if getattr(cfg, k) != getattr(found, k)
    }
    if wrong:
        raise UsageError(f"--from: {path} does not match the checkpoint (config, ckpt): {wrong}")
    return dataclasses.replace(cfg, scan_layers=found.scan_layers)


def to_hf(
    source: str,
    hf_dir: str,
    *,
    stage: str | None,
    preset: str | None,
    param_dtype: str | None,
    max_shard_bytes: int,
) -> tuple[presets.ModelConfig, list[str]]:
    """Exported params → a transformers-loadable `hf_dir`; returns (config, weight files)."""
    params_dir, stage_dir = resolve_source(source, stage)
    cfg = source_config(params_dir, stage_dir, preset)
    _, shardings = _shardings(cfg)
    shapes = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    abstract = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
    )
    params = checkpointing.load_params(params_dir, abstract)
    if param_dtype:
        cfg = dataclasses.replace(cfg, param_dtype=param_dtype)
    files = hf_convert.export_hf(params, cfg, hf_dir, max_shard_bytes=max_shard_bytes)
    _copy_tokenizer([stage_dir, os.path.dirname(stage_dir)], hf_dir)
    return cfg, files


def define_flags(fv: flags.FlagValues) -> None:
    on = {"flag_values": fv}
    flags.DEFINE_string("from_hf", None, "Hugging Face directory to import.", **on)
    flags.DEFINE_string("to", None, "Output directory of an import.", **on)
    flags.DEFINE_string("from", None, "Workdir, stage dir or export.", **on)
    flags.DEFINE_string("to_hf", None, "Output Hugging Face directory of an export.", **on)
    flags.DEFINE_string("stage", None, "Stage of a --from workdir (default: last).", **on)
    flags.DEFINE_string("preset", None, "Model preset when no model_config.json.", **on)
    flags.DEFINE_enum("dtype", None, presets.DTYPES, "Compute dtype.", **on)
    flags.DEFINE_enum("param_dtype", None, presets.DTYPES, "Stored dtype.", **on)
    flags.DEFINE_integer("max_seq_len", None, "Import: KV cache cap.", **on)
    flags.DEFINE_bool("no_scan_layers", False, "Import: per-layer params.", **on)
    flags.DEFINE_string("max_shard_size", "5GB", "Export: largest safetensors file.", **on)
    flags.DEFINE_bool("distributed", False, "jax.distributed.initialize().", **on)
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0.", **on)
    flags.DEFINE_integer("num_processes", None, "Processes of a multi-host conversion.", **on)
    flags.DEFINE_integer("process_id", None, "This process's index.", **on)


def parse_args(argv: Sequence[str] | None):
    """Flags (absl; `--flagfile` works) → a namespace for `run` (`--from` is `source`)."""
    return cli.parse("convert", define_flags, argv)


def _initialize_distributed(args) -> None:
    if args.coordinator_address is not None:
        if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator_address,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    elif args.distributed:
        jax.distributed.initialize()


def run(args) -> str:
    """Everything `main` does, importable; returns a one-line summary."""
    importing = args.from_hf is not None or args.to is not None
    exporting = args.source is not None or args.to_hf is not None
    if importing == exporting:
        raise UsageError("pass either --from_hf with --to, or --from with --to_hf")
    if importing and (args.from_hf is None or args.to is None):
        raise UsageError("--from_hf and --to go together")
    if exporting and (args.source is None or args.to_hf is None):
        raise UsageError("--from and --to_hf go together")
    if args.max_seq_len is not None and args.max_seq_len <= 0:
        raise UsageError(f"--max_seq_len must be > 0, got {args.max_seq_len}")
    max_shard_bytes = parse_size(args.max_shard_size)
    _initialize_distributed(args)
    start = time.time()
    if importing:
        overrides = {k: getattr(args, k) for k in ("dtype", "param_dtype", "max_seq_len")}
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if args.no_scan_layers:
            overrides["scan_layers"] = False
        cfg = from_hf(args.from_hf, args.to, overrides)
        where = f"{args.from_hf} -> {os.path.join(args.to, 'export')}"
    else:
        cfg, files = to_hf(
            args.source,
            args.to_hf,
            stage=args.stage,
            preset=args.preset,
            param_dtype=args.param_dtype,
            max_shard_bytes=max_shard_bytes,
        )
        where = f"{args.source} -> {args.to_hf} ({len(files)} safetensors file(s))"
    return f"converted {cfg.num_params / 1e6:.1f}M params {where} in {time.time() - start:.1f}s"


def main(argv: Sequence[str] | None = None) -> None:
    from nemocascade import errors

    argv, verbose = errors.split_verbose(argv)
    args = cli.exit_on_usage_error("convert", parse_args, argv)
    source = f"--from_hf={args.from_hf}" if args.from_hf else f"--from={args.source}"
    try:
        with errors.one_line("convert", verbose=verbose, context=source):
            summary = run(args)
    except UsageError as e:
        sys.exit(f"convert: {e}")
    if jax.process_index() == 0:
        print(summary)


if __name__ == "__main__":
    main()
