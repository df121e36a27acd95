"""Typed, frozen configuration built from an `ml_collections.ConfigDict`.

This module is the only reader of ConfigDicts: `from_config_dict` turns the
dict of a config file into nested frozen dataclasses, rejecting unknown fields
and bad values with a message that names the field (`config.optim.lr`), before
anything is compiled. Library code receives these dataclasses only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from nemocascade.model import presets
from nemocascade.tasks import base as tasks_base


class ConfigError(ValueError):
    """A config value is invalid; the message names the field."""


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    shape: tuple[int, ...] = (1, -1, 1)
    rules: str = "fsdp"


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-4
    schedule: str = "cosine"  # cosine | constant
    warmup_steps: int = 0
    warmup_init_ratio: float = 0.0  # lr at step 0 as a fraction of `lr`
    min_lr_ratio: float = 0.0
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 1e-4
    grad_clip: float = 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 100
    batch_size: int = 16
    seq_len: int = 256
    num_microbatches: int = 1
    seed: int = 0
    log_every: int = 10
    eval_every: int = 100
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    logprob_impl: str = ""  # "" = pick by platform
    progress: bool = True


@dataclasses.dataclass(frozen=True)
class DataConfig:
    domains: tuple[str, ...] = tasks_base.DOMAINS
    modes: tuple[str, ...] = tasks_base.MODES
    num_examples: int = 4000
    pack: bool = True
    jsonl: str = ""  # read examples from this file instead of the task world
    eval_examples: int = 256
    template_style: str = "c1"


@dataclasses.dataclass(frozen=True)
class InitConfig:
    init_from: str = ""  # params of a previous stage (workdir/stage dir or checkpoint dir)
    resume_from: str = ""  # full train state to resume from


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    num_per_domain: int = 64
    max_new_tokens: int = 192
    thinking_budget: int = 160
    batch_size: int = 64
    domains: tuple[str, ...] = tasks_base.DOMAINS
    modes: tuple[str, ...] = tasks_base.MODES


@dataclasses.dataclass(frozen=True)
class Config:
    stage: str
    model: presets.ModelConfig
    mesh: MeshConfig = MeshConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    init: InitConfig = InitConfig()
    eval: EvalConfig = EvalConfig()
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _ConfigSections:
    """`Config` without the model, which is built from its preset separately."""

    stage: str
    mesh: MeshConfig = MeshConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    init: InitConfig = InitConfig()
    eval: EvalConfig = EvalConfig()


STAGES = ("sft", "rm", "rlhf", "stage1_short", "stage2_medium", "stage3_long", "mopd", "cascade")


def _convert(value: Any, annotation: Any, path: str) -> Any:
    """Coerces a ConfigDict leaf to the dataclass field's type."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a sequence, got {value!r}")
        (elem, *_) = typing.get_args(annotation) or (Any,)
        return tuple(_convert(v, elem, path) for v in value)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path} must be a bool, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path} must be an int, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path} must be a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path} must be a string, got {value!r}")
        return value
    return value


def build(cls, section: Any, path: str):
    """Builds dataclass `cls` from a ConfigDict/dict section, naming bad fields."""
    section = dict(section.items()) if section is not None else {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(section) - names)
    if unknown:
        raise ConfigError(
            f"unknown field(s) {[f'{path}.{u}' for u in unknown]}; valid: {sorted(names)}"
        )
    kwargs = {}
    for name, value in section.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = build(hint, value, f"{path}.{name}")
        elif isinstance(hint, types.GenericAlias) and typing.get_origin(hint) is dict:
            kwargs[name] = dict(value.items()) if hasattr(value, "items") else value
        else:
            kwargs[name] = _convert(value, hint, f"{path}.{name}")
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None


def _check(cond: bool, message: str):
    if not cond:
        raise ConfigError(message)


def validate(cfg: Config) -> Config:
    """Value checks that do not depend on the devices."""
    o, t, d = cfg.optim, cfg.train, cfg.data
    _check(cfg.stage in STAGES, f"config.stage={cfg.stage!r}; choose from {STAGES}")
    _check(o.lr > 0, f"config.optim.lr must be > 0, got {o.lr}")
    _check(o.schedule in ("cosine", "constant"), f"config.optim.schedule={o.schedule!r}")
    _check(0 <= o.min_lr_ratio <= 1, "config.optim.min_lr_ratio must be in [0, 1]")
    _check(o.warmup_steps >= 0, "config.optim.warmup_steps must be >= 0")
    _check(0 <= o.b1 < 1 and 0 <= o.b2 < 1, "config.optim.b1/b2 must be in [0, 1)")
    _check(o.grad_clip >= 0, "config.optim.grad_clip must be >= 0 (0 disables)")
    _check(t.steps >= 0, f"config.train.steps must be >= 0, got {t.steps}")
    _check(t.batch_size > 0, f"config.train.batch_size must be > 0, got {t.batch_size}")
    _check(t.seq_len > 1, f"config.train.seq_len must be > 1, got {t.seq_len}")
    _check(
        t.num_microbatches > 0 and t.batch_size % t.num_microbatches == 0,
        f"config.train.num_microbatches={t.num_microbatches} must divide "
        f"config.train.batch_size={t.batch_size}",
    )
    _check(
        t.log_every > 0 and t.eval_every > 0 and t.checkpoint_every > 0,
        "config.train.log_every/eval_every/checkpoint_every must be > 0",
    )
    for dom in d.domains:
        _check(
            dom in tasks_base.DOMAINS,
            f"config.data.domains has {dom!r}; valid {tasks_base.DOMAINS}",
        )
    for mode in d.modes:
        _check(
            mode in tasks_base.MODES, f"config.data.modes has {mode!r}; valid {tasks_base.MODES}"
        )
    _check(d.template_style in ("c1", "c2"), f"config.data.template_style={d.template_style!r}")
    _check(
        cfg.model.max_seq_len >= t.seq_len,
        f"config.train.seq_len={t.seq_len} exceeds model max_seq_len={cfg.model.max_seq_len}",
    )
    return cfg


def from_config_dict(cd: Any) -> Config:
    """ConfigDict (from a config file) → validated `Config`."""
    cd = dict(cd.items())
    _check("stage" in cd, "config.stage is missing")
    model_cd = dict(cd.pop("model", {}).items())
    preset = model_cd.pop("preset", "tiny")
    try:
        model = presets.get_preset(preset, **model_cd)
    except ValueError as e:
        raise ConfigError(f"config.model: {e}") from None
    hints = {f.name for f in dataclasses.fields(Config)}
    extra = {k: cd.pop(k) for k in list(cd) if k not in hints}
    cfg = build(_ConfigSections, cd, "config")
    cfg = Config(
        model=model,
        extra=extra,
        **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(_ConfigSections)},
    )
    return validate(cfg)


def check_devices(cfg: Config, num_devices: int):
    """Device-dependent checks (mesh divides devices, batch divides data axes)."""
    from nemocascade.sharding import mesh as mesh_lib

    try:
        shape = mesh_lib.resolve_shape(cfg.mesh.shape, num_devices)
    except ValueError as e:
        raise ConfigError(f"config.{e}") from None
    data_par = shape[0] * shape[1]
    micro = cfg.train.batch_size // cfg.train.num_microbatches
    _check(
        micro % data_par == 0,
        f"config.train.batch_size / num_microbatches = {micro} must be divisible by the "
        f"data-parallel size data*fsdp = {data_par} (mesh {shape})",
    )
