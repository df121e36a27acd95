"""Hugging Face Qwen3 / Llama checkpoints ⇄ nemocascade params, one tensor at a time.

Import (`import_params`) reads `config.json` into a `ModelConfig`
(`config_from_hf`), checks every tensor's name and shape from the safetensors
headers before reading any data, then builds each parameter leaf directly in
its sharding: `jax.make_array_from_callback` asks for the slice each
addressable device holds and only that slice is read from disk (transposed
from the HF `[out, in]` Linear layout and, for scanned params, stacked over
layers). On a multi-host mesh every process therefore reads only its own
shards; no host ever holds the whole model, and without a mesh the peak host
memory is one leaf.

Export (`export_hf`) writes `config.json` and `model.safetensors` (or
`model-0000i-of-0000n.safetensors` plus `model.safetensors.index.json` above
`max_shard_bytes`), fetching one layer's tensor at a time; on multi-host runs
every process joins the gathers and process 0 writes.

Layouts (ours ← HF): embedding `[V, D]` as is; q/k/v `[D, N|K, H]` ← `[N|K·H, D]`;
o `[N, H, D]` ← `[D, N·H]`; gate/up `[D, F]` ← `[F, D]`; down `[F, D]` ← `[D, F]`;
norm scales as is; `lm_head [D, V]` ← `[V, D]` (absent when tied).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy
from flax import traverse_util
from jax.experimental import multihost_utils

from nemocascade.model import presets, transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # transformers' "5GB"
SUPPORTED_MODEL_TYPES = ("llama", "qwen3")

_NP_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
_HF_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float32"}
_SHARD_NAME = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
# Tensors that carry no parameters (old Llama checkpoints store RoPE frequencies).
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


# ---------------------------------------------------------------- config.json


def _unsupported(path: str, field: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{path}: {field}={value!r} is not supported ({why})")


def _rope_theta(hf: dict, path: str) -> float:
    """RoPE base from either config style (transformers 4: `rope_theta` + `rope_scaling`,
    transformers 5: `rope_parameters`); scaled RoPE variants are rejected."""
    params = hf.get("rope_parameters")
    scaling = hf.get("rope_scaling")
    for field, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is None:
            continue
        kind = value.get("rope_type", value.get("type", "default"))
        if kind != "default":
            raise _unsupported(path, field, value, "only unscaled RoPE (rope_type 'default')")
    if params is not None and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(hf.get("rope_theta", 10_000.0))


def _check_supported(hf: dict, path: str) -> None:
    kind = hf.get("model_type")
    if kind not in SUPPORTED_MODEL_TYPES:
        raise _unsupported(path, "model_type", kind, f"expected one of {SUPPORTED_MODEL_TYPES}")
    flags = {
        "hidden_act": (hf.get("hidden_act", "silu"), "silu", "the MLP is SwiGLU"),
        "attention_bias": (hf.get("attention_bias", False), False, "projections are bias-free"),
        "mlp_bias": (hf.get("mlp_bias", False), False, "projections are bias-free"),
        "use_sliding_window": (hf.get("use_sliding_window", False), False, "full attention only"),
        "partial_rotary_factor": (hf.get("partial_rotary_factor", 1.0), 1.0, "full-width RoPE"),
    }
    for field, (value, wanted, why) in flags.items():
        if value != wanted:
            raise _unsupported(path, field, value, why)
    if kind == "llama" and hf.get("sliding_window") is not None:
        raise _unsupported(path, "sliding_window", hf["sliding_window"], "full attention only")
    layer_types = hf.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise _unsupported(path, "layer_types", layer_types, "full attention only")
    for field in ("num_experts", "num_local_experts", "moe_intermediate_size"):
        if hf.get(field):
            raise _unsupported(path, field, hf[field], "mixture-of-experts models")
    if hf.get("quantization_config"):
        raise _unsupported(path, "quantization_config", "...", "quantized weights")


def read_hf_config(hf_dir: str) -> dict:
    path = os.path.join(hf_dir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no {CONFIG_FILE} in {hf_dir!r}")
    with open(path) as f:
        return json.load(f)


def config_from_hf(hf_dir: str, **overrides) -> presets.ModelConfig:
    """The `ModelConfig` of a Hugging Face Qwen3/Llama directory.

    Storage and compute dtypes default to the checkpoint's (`torch_dtype` /
    `dtype`; float16 becomes float32), `max_seq_len` to
    `max_position_embeddings`; `overrides` replace any field (e.g. `dtype`,
    `remat_policy`, `scan_layers`). Unsupported architecture fields raise
    ValueError naming the field and the file.
    """
    hf = read_hf_config(hf_dir)
    path = os.path.join(hf_dir, CONFIG_FILE)
    _check_supported(hf, path)
    required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    missing = [f for f in required + ("num_attention_heads",) if f not in hf]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}")
    d, n = hf["hidden_size"], hf["num_attention_heads"]
    is_qwen3 = hf["model_type"] == "qwen3"
    head_dim = hf.get("head_dim")
    if head_dim is None:
        if is_qwen3:
            head_dim = 128  # transformers' Qwen3Config default
        elif d % n:
            raise ValueError(
                f"{path}: hidden_size={d} is not a multiple of num_attention_heads={n}"
            )
        else:
            head_dim = d // n
    dtype = _HF_DTYPES.get(str(hf.get("torch_dtype") or hf.get("dtype") or "float32"), "float32")
    fields = dict(
        vocab_size=hf["vocab_size"],
        d_model=d,
        num_layers=hf["num_hidden_layers"],
        num_heads=n,
        num_kv_heads=hf.get("num_key_value_heads") or n,
        head_dim=head_dim,
        d_ff=hf["intermediate_size"],
        rope_theta=_rope_theta(hf, path),
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qk_norm=is_qwen3,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        dtype=dtype,
        param_dtype=dtype,
        max_seq_len=int(hf.get("max_position_embeddings", 2048)),
    )
    return presets.ModelConfig(**{**fields, **overrides})


def hf_config_dict(cfg: presets.ModelConfig) -> dict:
    """`config.json` contents for `cfg`: Qwen3 when it has qk-norm, else Llama.

    Both RoPE spellings are written so transformers 4 and 5 read the same theta.
    """
    qwen3 = cfg.qk_norm
    out = {
        "architectures": ["Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLM"],
        "model_type": "qwen3" if qwen3 else "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "torch_dtype": cfg.param_dtype,
    }
    if qwen3:
        out.update(use_sliding_window=False, sliding_window=None)
    else:
        out.update(mlp_bias=False)
    return out


# ---------------------------------------------------------------- the mapping


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One of our param leaves and the HF tensor(s) it comes from.

    kind: "copy" (same layout), "linear" (`[out, in]` → `[in, out]`),
    "heads_in" (`[X·H, D]` → `[D, X, H]`), "heads_out" (`[D, N·H]` → `[N, H, D]`).
    hf_names has one name per layer when the leaf is stacked over layers.
    """

    path: tuple[str, ...]
    hf_names: tuple[str, ...]
    kind: str
    stacked: bool


def _layer_tensors(cfg: presets.ModelConfig) -> list[tuple[tuple[str, ...], str, str]]:
    """(path inside a block, HF name inside `model.layers.{i}.`, kind)."""
    out = [
        (("attn_norm", "scale"), "input_layernorm.weight", "copy"),
        (("attn", "q_proj", "kernel"), "self_attn.q_proj.weight", "heads_in"),
        (("attn", "k_proj", "kernel"), "self_attn.k_proj.weight", "heads_in"),
        (("attn", "v_proj", "kernel"), "self_attn.v_proj.weight", "heads_in"),
        (("attn", "o_proj", "kernel"), "self_attn.o_proj.weight", "heads_out"),
        (("mlp_norm", "scale"), "post_attention_layernorm.weight", "copy"),
        (("mlp", "gate_proj", "kernel"), "mlp.gate_proj.weight", "linear"),
        (("mlp", "up_proj", "kernel"), "mlp.up_proj.weight", "linear"),
        (("mlp", "down_proj", "kernel"), "mlp.down_proj.weight", "linear"),
    ]
    if cfg.qk_norm:
        out[4:4] = [
            (("attn", "q_norm", "scale"), "self_attn.q_norm.weight", "copy"),
            (("attn", "k_norm", "scale"), "self_attn.k_norm.weight", "copy"),
        ]
    return out


def leaf_map(cfg: presets.ModelConfig) -> list[_Leaf]:
    """Every param leaf of `cfg` with its HF source tensor(s)."""
    leaves = [_Leaf(("embed", "embedding"), ("model.embed_tokens.weight",), "copy", False)]
    layer_names = [f"model.layers.{i}." for i in range(cfg.num_layers)]
    for sub, name, kind in _layer_tensors(cfg):
        if cfg.scan_layers:
            names = tuple(p + name for p in layer_names)
            leaves.append(_Leaf(("layers",) + sub, names, kind, True))
        else:
            leaves += [
                _Leaf((f"layer_{i}",) + sub, (p + name,), kind, False)
                for i, p in enumerate(layer_names)
            ]
    leaves.append(_Leaf(("final_norm", "scale"), ("model.norm.weight",), "copy", False))
    if not cfg.tie_embeddings:
        leaves.append(_Leaf(("lm_head",), ("lm_head.weight",), "linear", False))
    return leaves


def _hf_shape(kind: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """HF tensor shape of one (per-layer) leaf of ours."""
    if kind == "copy":
        return shape
    if kind == "linear":
        return shape[::-1]
    if kind == "heads_in":
        d, x, h = shape
        return (x * h, d)
    n, h, d = shape
    return (d, n * h)


def _to_hf(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "copy":
        return x
    if kind == "linear":
        return x.T
    if kind == "heads_in":
        return x.reshape(x.shape[0], -1).T
    return x.reshape(-1, x.shape[-1]).T


def _read_slice(read: Callable, kind: str, shape, index: tuple[slice, ...]) -> np.ndarray:
    """Our per-layer leaf `[index]`, reading only the matching part of the HF tensor.

    `read(hf_index)` returns the HF tensor sliced by a tuple of slices. Head
    slices map to contiguous HF row/column ranges (whole heads), then the
    head_dim slice is applied after the reshape.
    """
    if kind == "copy":
        return read(index)
    if kind == "linear":
        return read(index[::-1]).T
    if kind == "heads_in":
        d, x, h = index
        rows = slice(x.start * shape[2], x.stop * shape[2])
        block = read((rows, d)).T
        return block.reshape(block.shape[0], -1, shape[2])[:, :, h]
    n, h, d = index
    cols = slice(n.start * shape[1], n.stop * shape[1])
    block = read((d, cols)).T
    return block.reshape(-1, shape[1], block.shape[-1])[:, h, :]


# ---------------------------------------------------------------- reading


class _Checkpoint:
    """Lazily opened safetensors files of one HF directory (single or sharded)."""

    def __init__(self, hf_dir: str):
        self.hf_dir = hf_dir
        index_path = os.path.join(hf_dir, INDEX_FILE)
        if os.path.exists(index_path):
            with open(index_path) as f:
                self.files = dict(json.load(f)["weight_map"])
        elif os.path.exists(os.path.join(hf_dir, WEIGHTS_FILE)):
            with safetensors.safe_open(os.path.join(hf_dir, WEIGHTS_FILE), "numpy") as f:
                self.files = dict.fromkeys(f.keys(), WEIGHTS_FILE)
        else:
            raise FileNotFoundError(f"no {WEIGHTS_FILE} or {INDEX_FILE} in {hf_dir!r}")
        self._open: dict[str, Any] = {}
        self.bytes_read = 0

    def _handle(self, name: str):
        if name not in self.files:
            raise KeyError(f"{self.hf_dir}: tensor {name!r} is missing from the checkpoint")
        file = self.files[name]
        if file not in self._open:
            self._open[file] = safetensors.safe_open(os.path.join(self.hf_dir, file), "numpy")
        return self._open[file]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._handle(name).get_slice(name).get_shape())

    def read(self, name: str, index: tuple[slice, ...]) -> np.ndarray:
        out = self._handle(name).get_slice(name)[index]
        self.bytes_read += out.nbytes
        return out


def _normalize(index: tuple, shape: tuple[int, ...]) -> tuple[slice, ...]:
    index = tuple(index) + (slice(None),) * (len(shape) - len(index))
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape, strict=True))


def _check_tensors(ckpt: _Checkpoint, cfg, leaves, shapes) -> None:
    """Fails before any read on missing, misshapen or unused tensors."""
    wanted = set()
    for leaf in leaves:
        shape = shapes[leaf.path][1:] if leaf.stacked else shapes[leaf.path]
        expect = _hf_shape(leaf.kind, tuple(shape))
        for name in leaf.hf_names:
            wanted.add(name)
            got = ckpt.shape(name)
            if got != expect:
                raise ValueError(
                    f"{ckpt.hf_dir}: tensor {name!r} has shape {got}, expected {expect} "
                    f"for {CONFIG_FILE}'s model shape"
                )
    unused = [
        n
        for n in ckpt.files
        if n not in wanted
        and not n.endswith(_IGNORED_SUFFIXES)
        and not (cfg.tie_embeddings and n == "lm_head.weight")
    ]
    if unused:
        raise ValueError(f"{ckpt.hf_dir}: tensors with no counterpart in the model: {unused[:8]}")


def import_params(
    hf_dir: str, cfg: presets.ModelConfig, *, shardings: Any = None, stats: dict | None = None
) -> dict:
    """Params of `cfg` read from the safetensors of `hf_dir`.

    With `shardings` (a pytree of NamedSharding matching the params, e.g.
    `trainer.state.param_shardings(cfg, mesh, rules)`) each leaf is created in
    its sharding from the slices its addressable devices hold; without, the
    leaves land on the default device. `stats["bytes_read"]` receives the bytes
    this process read.
    """
    abstract = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    flat = traverse_util.flatten_dict(abstract)
    shapes = {k: v.shape for k, v in flat.items()}
    flat_shardings = traverse_util.flatten_dict(shardings) if shardings is not None else None
    leaves = leaf_map(cfg)
    missing = sorted(set(flat) - {leaf.path for leaf in leaves})
    if missing:
        raise ValueError(f"no Hugging Face source for params {missing}")
    ckpt = _Checkpoint(hf_dir)
    _check_tensors(ckpt, cfg, leaves, shapes)
    dtype = _NP_DTYPES[cfg.param_dtype]
    out = {}
    for leaf in leaves:
        shape = shapes[leaf.path]
        layer_shape = shape[1:] if leaf.stacked else shape
        seen: dict[tuple, np.ndarray] = {}

        def fetch(index, leaf=leaf, shape=shape, layer_shape=layer_shape, seen=seen):
            index = _normalize(index, shape)
            key = tuple((s.start, s.stop) for s in index)
            if key not in seen:  # replicated shards ask for the same slice
                per_layer = index[1:] if leaf.stacked else index
                names = leaf.hf_names[index[0]] if leaf.stacked else leaf.hf_names
                parts = [
                    _read_slice(
                        lambda i, n=n: ckpt.read(n, i), leaf.kind, layer_shape, per_layer
                    ).astype(dtype)
                    for n in names
                ]
                seen[key] = np.stack(parts) if leaf.stacked else parts[0]
            return seen[key]

        if flat_shardings is None:
            out[leaf.path] = jnp.asarray(fetch(()))
        else:
            out[leaf.path] = jax.make_array_from_callback(shape, flat_shardings[leaf.path], fetch)
    if stats is not None:
        stats["bytes_read"] = ckpt.bytes_read
    return traverse_util.unflatten_dict(out)


# ---------------------------------------------------------------- writing


def _hf_order(name: str) -> tuple[int, int]:
    if name.startswith("model.layers."):
        return (1, int(name.split(".")[2]))
    return ({"model.embed_tokens.weight": 0, "model.norm.weight": 2}.get(name, 3), 0)


def _host(x: jax.Array) -> np.ndarray:
    """The whole array on this host; collective (every process calls it) on multi-host."""
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def export_hf(
    params: dict,
    cfg: presets.ModelConfig,
    out_dir: str,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> list[str]:
    """Writes `params` as a transformers-loadable directory; returns the weight files.

    Tensors are written in `cfg.param_dtype`, in HF order, one layer's tensor
    fetched at a time; a new file starts when the next tensor would take the
    current one past `max_shard_bytes`. Every process must call this on a
    multi-host mesh; process 0 writes.
    """
    flat = traverse_util.flatten_dict(params)
    dtype = _NP_DTYPES[cfg.param_dtype]
    # (hf name, leaf, layer or None), in transformers' order: embedding, each
    # layer in turn, final norm, lm_head (a stable sort keeps in-layer order).
    entries = []
    for leaf in leaf_map(cfg):
        if leaf.path not in flat:
            raise ValueError(f"params lack {'/'.join(leaf.path)} required by the model config")
        layers = range(len(leaf.hf_names)) if leaf.stacked else [None]
        entries += [(leaf.hf_names[i or 0], leaf, i) for i in layers]
    entries.sort(key=lambda e: _hf_order(e[0]))
    sizes = [
        int(np.prod(flat[leaf.path].shape[1 if layer is not None else 0 :])) * dtype.itemsize
        for _, leaf, layer in entries
    ]
    shards: list[list[int]] = [[]]
    total = 0
    for i, size in enumerate(sizes):
        if shards[-1] and total + size > max_shard_bytes:
            shards.append([])
            total = 0
        shards[-1].append(i)
        total += size
    names = (
        [WEIGHTS_FILE]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    writer = jax.process_index() == 0
    if writer:
        os.makedirs(out_dir, exist_ok=True)
        # Weight files of an earlier export would mix with this one's.
        for f in os.listdir(out_dir):
            if f in (WEIGHTS_FILE, INDEX_FILE) or _SHARD_NAME.fullmatch(f):
                os.remove(os.path.join(out_dir, f))
    weight_map = {}
    for file, members in zip(names, shards, strict=True):
        tensors = {}
        for i in members:
            name, leaf, layer = entries[i]
            x = flat[leaf.path] if layer is None else flat[leaf.path][layer]
            tensors[name] = np.ascontiguousarray(_to_hf(leaf.kind, _host(x).astype(dtype)))
            weight_map[name] = file
        if writer:
            safetensors.numpy.save_file(
                tensors, os.path.join(out_dir, file), metadata={"format": "pt"}
            )
    if writer:
        with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
            json.dump(hf_config_dict(cfg), f, indent=2)
        if len(names) > 1:
            with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
                index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
                json.dump(index, f, indent=2)
    return names
