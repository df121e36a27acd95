"""Typed, frozen configuration built from an `ml_collections.ConfigDict`.

This module is the only reader of ConfigDicts: `from_config_dict` turns the
dict of a config file into nested frozen dataclasses, rejecting unknown fields
and bad values with a message that names the field (`config.optim.lr`), before
anything is compiled. Library code receives these dataclasses only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from etils import epath
from ml_collections import config_dict

from nemocascade import stage_registry
from nemocascade.data import chat_template, jinja_template
from nemocascade.losses import advantages, kl, policy
from nemocascade.model import presets
from nemocascade.rewards.sandbox import jail
from nemocascade.rollout import groups
from nemocascade.tasks import base as tasks_base, registry as tasks_registry


class ConfigError(ValueError):
    """A config value is invalid; the message names the field."""


# Choices that belong to the trainer's host code (the library ones are imported).
RL_MODES = (*tasks_base.MODES, "half_half")
OVERLONG = ("filter", "zero_reward", "none")
DYNAMIC_FILTERS = ("none", "batch", "refill", "epoch")


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
    profile_steps: tuple[int, ...] = ()  # "START,END": jax.profiler trace into <stage>/tb
    wandb_project: str = ""  # Weights & Biases project beside TensorBoard ("" = off)
    wandb_mode: str = ""  # "" (wandb's default) | online | offline | disabled
    progress: bool = True
    # Persistent XLA compilation cache: "auto" = WORKDIR/jax_cache (shared by a
    # cascade's stages and by reruns), "" = off, else a directory.
    compilation_cache: str = "auto"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    domains: tuple[str, ...] = tasks_base.DOMAINS
    modes: tuple[str, ...] = tasks_base.MODES
    num_examples: int = 4000
    domain_weights: tuple[float, ...] = ()  # per `domains` entry: × num_examples; () = equal
    pack: bool = True
    # Real data (docs/data.md): JSONL / Parquet / saved-dataset paths instead of the
    # task world, mixed by `file_weights` (× each file's records per epoch).
    files: tuple[str, ...] = ()
    file_weights: tuple[float, ...] = ()
    task_world: bool = True  # False (`:8b`/`:14b`): data.files and init.init_from are required
    eval_files: tuple[str, ...] = ()  # held-out records (SFT loss, RM accuracy)
    eval_examples: int = 256
    # Tokenizer and chat template (data/text.py): "" = the init_from checkpoint's.
    tokenizer: str = ""
    chat_template: str = ""
    mode_switch: str = "enable_thinking"  # how a Jinja template learns the mode
    template_style: str = "c1"  # the built-in template's layout
    loss_turns: str = "all"  # SFT on "all" assistant turns of a conversation, or the "last"
    long_prompts: str = "drop"  # RL prompts longer than the context: "drop" (warn) | "error"


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
    # Benchmark suites (nemocascade/evaluation/suites.py: "humaneval", "gsm8k:/data/x.jsonl")
    # added to the eval matrix as <suite>/<mode>/<metric> and to the forgetting guard.
    suites: tuple[str, ...] = ()
    # On-policy stages: > 0 checks the domains outside `rl.domains` at every
    # `train.eval_every` against the stage's start (trainer/onpolicy/guard.py).
    guard_tolerance: float = 0.0
    guard_stop: bool = False  # stop at a drop; finish with the last passing params


@dataclasses.dataclass(frozen=True)
class CurriculumStage:
    """One sub-stage of a response-length curriculum (C1 math RL: 24K → 32K → 40K).

    Its prompt side (C1 SWE RL's input-context curriculum, 16K → 24K prompt
    tokens; trainer/onpolicy/prompt_curriculum.py): prompts longer than
    `max_prompt_tokens` (0 = no limit) and examples of difficulty levels not
    in `levels` (() = all) are skipped and counted.
    """

    steps: int
    max_new_tokens: int
    temperature: float
    max_prompt_tokens: int = 0
    levels: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """One RL stage (GRPO, strictly on-policy). Defaults follow the paper (§2 of the recipe)."""

    domains: tuple[str, ...] = ("math",)
    reward: str = ""  # verifier name; "" = the domain's verifier; "rm" = reward model
    reward_fn: str = ""  # "package.module:function" reward plug-in (verifier signature), any domain
    # reward "swe" (rewards/swe_patch.py): scores below swe_shaping become 0 (C1 Table 12
    # uses 0.5; 0 = off); swe_judge = "package.module:function", fn(issue, patch, golden)
    # -> P(resolves), replaces the similarity of non-identical patches (C1 §4.7).
    swe_shaping: float = 0.0
    swe_judge: str = ""
    rm_from: str = ""  # stage dir of the reward model when reward == "rm" or rm_bonus
    rm_bonus: bool = False  # verifier reward + sigmoid(group-z RM score) where it passes (C1 §4.4)
    mode: str = "thinking"  # thinking | instruct | half_half
    group_size: int = 8
    prompts_per_step: int = 8
    num_prompts: int = 2000  # RL-split prompts per domain (times its weight)
    domain_weights: tuple[float, ...] = ()  # prompt-pool share per domain; () = equal
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    thinking_budget: int = 0  # 0 = no budget beyond max_new_tokens
    overlong: str = "filter"  # filter | zero_reward | none
    dynamic_filter: str = "none"  # none | batch | refill | epoch
    # dynamic_filter="refill": at most this many extra rounds of prompts_per_step
    # prompts per step to fill the batch with informative groups (onpolicy/refill.py).
    refill_max_batches: int = 4
    resample_easy: float = 0.01
    resample_hard: float = 0.1
    advantage: str = "grpo"  # grpo | loo | mean_only
    reward_shaping: str = "none"  # none | zscore_tanh | zscore (losses/advantages.SHAPINGS)
    aggregation: str = "token_mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 0.0  # 0 = off
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    kl_in_reward: bool = False
    entropy_coef: float = 0.0
    curriculum: tuple[CurriculumStage, ...] = ()
    # > 0: the prompt stream sorts windows of this many prompts by length and
    # serves them a step's worth of similar length at a time (a multiple of
    # prompts_per_step; trainer/onpolicy/prompt_curriculum.py). 0 = off.
    length_group_window: int = 0
    eval_num: int = 64  # held-out prompts per domain for the stage's own eval
    verifier_workers: int = 2
    verifier_timeout_s: float = 10.0
    # Rollout engine: "static" (one batch until its longest row ends) or
    # "continuous" (engine_slots decode slots refilled as rows finish, the
    # group's prompt prefilled once, verifier rewards scored while decoding).
    engine: str = "static"
    engine_slots: int = 64
    # Optimizer updates per rollout batch (mini-batches of it, PPO-style); 1 is
    # the paper's strictly on-policy step, where the clip options are inert.
    updates_per_batch: int = 1
    # MOPD: "domain=dir,domain/mode=dir,..." (stage dirs or exports); see parse_teachers.
    teachers: str = ""
    # MOPD inside a cascade: pick a teacher per domain and sampled mode (the stage with
    # the best `<domain>/<mode>` cell) rather than per domain by the thinking mode alone.
    teacher_per_mode: bool = False

    @property
    def train_modes(self) -> tuple[str, ...]:
        """The decoding modes the stage samples in (`half_half`: both)."""
        return tasks_base.MODES if self.mode == "half_half" else (self.mode,)


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Where model-written code runs (docs/security.md)."""

    backend: str = "bwrap"  # bwrap | rlimit (weaker, explicit opt-in only)


@dataclasses.dataclass(frozen=True)
class RMConfig:
    """The reward-model stage's own knobs (`stage=rm`)."""

    noise: float = 0.1  # label-flip probability of built-in pairs
    margin: float = 0.0  # Bradley–Terry margin m in −log σ(r⁺ − r⁻ − m)
    epochs: float = 1.0  # passes over the pairs when train.steps == 0
    rows_per_pair: float = 0.5  # packed rows (of 2 × seq_len) per pair of a batch; 1 = no drops


@dataclasses.dataclass(frozen=True)
class CascadeConfig:
    """The chain of stages (`stage=cascade`); stage names from `stage_registry`."""

    order: str = "c1"  # a key of stage_registry.ORDERS: c1 | c1_mopd | c2 | c2_mopd
    stages: tuple[str, ...] = ()  # a subset/reordering; () = the order's stages
    size: str = "tiny"  # each stage's `configs/<stage>.py:<size>`
    forgetting_tolerance: float = 0.03
    # True: each on-policy stage checks the cells it does not train at every
    # eval and stops at a drop over the tolerance (trainer/onpolicy/guard.py).
    stop_on_forgetting: bool = False
    defaults: str = ""  # the size's per-stage settings, "stage.section.field=value;..."
    set: str = ""  # the same form, applied after `defaults`
    seed: int = -1  # >= 0: every stage's train.seed (before `set`); -1: each stage's own

    @property
    def chain(self) -> tuple[str, ...]:
        return stage_registry.chain(self.order, self.stages)


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
    rl: RLConfig = RLConfig()
    sandbox: SandboxConfig = SandboxConfig()
    rm: RMConfig = RMConfig()
    cascade: CascadeConfig = CascadeConfig()


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
    rl: RLConfig = RLConfig()
    sandbox: SandboxConfig = SandboxConfig()
    rm: RMConfig = RMConfig()
    cascade: CascadeConfig = CascadeConfig()


STAGES = stage_registry.NAMES


def _convert(value: Any, annotation: Any, path: str) -> Any:
    """Coerces a ConfigDict leaf to the dataclass field's type."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]  # the flag parser reads `--config.f=a,b` as ('a,b',)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a sequence, got {value!r}")
        (elem, *_) = typing.get_args(annotation) or (Any,)
        if dataclasses.is_dataclass(elem):
            return tuple(build(elem, v, f"{path}[{i}]") for i, v in enumerate(value))
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
    _check(o.weight_decay >= 0, f"config.optim.weight_decay must be >= 0, got {o.weight_decay}")
    _check(o.eps > 0, f"config.optim.eps must be > 0, got {o.eps}")
    _check(t.steps >= 0, f"config.train.steps must be >= 0, got {t.steps}")
    _check(
        cfg.stage != "cascade" or t.seed == TrainConfig.seed,
        "config.train.seed does not reach the cascade's stages (each loads its own "
        "configs/<stage>.py); set --config.cascade.seed instead",
    )
    _check(t.batch_size > 0, f"config.train.batch_size must be > 0, got {t.batch_size}")
    _check(
        t.keep_checkpoints >= 1,
        f"config.train.keep_checkpoints must be >= 1, got {t.keep_checkpoints}",
    )
    _check(t.seq_len > 1, f"config.train.seq_len must be > 1, got {t.seq_len}")
    _check(
        t.num_microbatches > 0 and t.batch_size % t.num_microbatches == 0,
        f"config.train.num_microbatches={t.num_microbatches} must divide "
        f"config.train.batch_size={t.batch_size}",
    )
    _check(
        not t.profile_steps
        or (len(t.profile_steps) == 2 and 1 <= t.profile_steps[0] <= t.profile_steps[1]),
        f"config.train.profile_steps={t.profile_steps}: expected START,END with 1 <= START <= END",
    )
    _check(
        t.wandb_mode in ("", "online", "offline", "disabled"),
        f"config.train.wandb_mode={t.wandb_mode!r}; choose online, offline or disabled",
    )
    _check(
        t.log_every > 0 and t.eval_every > 0 and t.checkpoint_every > 0,
        "config.train.log_every/eval_every/checkpoint_every must be > 0",
    )
    _check(
        cfg.eval.guard_tolerance >= 0,
        f"config.eval.guard_tolerance must be >= 0, got {cfg.eval.guard_tolerance}",
    )
    for spec in cfg.eval.suites:
        from nemocascade.evaluation import suites as suites_lib

        problem = suites_lib.spec_error(spec)
        _check(problem is None, f"config.eval.suites: {problem}")
    _check(
        not cfg.eval.guard_stop or cfg.eval.guard_tolerance > 0,
        "config.eval.guard_stop needs config.eval.guard_tolerance > 0",
    )
    _check(
        not cfg.eval.guard_tolerance or cfg.eval.num_per_domain > 0,
        "config.eval.guard_tolerance > 0 needs config.eval.num_per_domain > 0 (the guard's eval)",
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
    _check(
        d.template_style in chat_template.STYLES,
        f"config.data.template_style={d.template_style!r}; choose from {chat_template.STYLES}",
    )
    _check(
        d.mode_switch in jinja_template.MODE_SWITCHES,
        f"config.data.mode_switch={d.mode_switch!r}; choose from {jinja_template.MODE_SWITCHES}",
    )
    _check(d.loss_turns in ("all", "last"), f"config.data.loss_turns={d.loss_turns!r}")
    _check(d.long_prompts in ("drop", "error"), f"config.data.long_prompts={d.long_prompts!r}")
    _check(
        not d.file_weights
        or (len(d.file_weights) == len(d.files) and all(w > 0 for w in d.file_weights)),
        f"config.data.file_weights={d.file_weights}: need one positive weight per "
        f"config.data.files entry ({len(d.files)} files)",
    )
    _check(
        not d.domain_weights
        or (len(d.domain_weights) == len(d.domains) and all(w > 0 for w in d.domain_weights)),
        f"config.data.domain_weights={d.domain_weights}: need one positive weight per "
        f"config.data.domains entry {d.domains}",
    )
    _check(
        cfg.model.max_seq_len >= t.seq_len,
        f"config.train.seq_len={t.seq_len} exceeds model max_seq_len={cfg.model.max_seq_len}",
    )
    chunk = cfg.model.mlp_seq_chunk
    _check(
        not chunk or t.seq_len <= chunk or t.seq_len % chunk == 0,
        f"config.model.mlp_seq_chunk={chunk} does not divide config.train.seq_len="
        f"{t.seq_len}: the MLP would run the whole sequence at once",
    )
    _validate_rl(cfg.rl)
    _validate_prompt_curriculum(cfg)
    _validate_rm(cfg)
    _validate_cascade(cfg.cascade)
    _check(
        cfg.sandbox.backend in jail.BACKENDS,
        f"config.sandbox.backend={cfg.sandbox.backend!r}; choose from {jail.BACKENDS}",
    )
    _check(
        not (cfg.rl.domain_weights and d.files),
        "config.rl.domain_weights weights the built-in world's per-domain prompt pools; "
        "with config.data.files set, mix the files with config.data.file_weights",
    )
    return cfg


def parse_teachers(text: str) -> dict[str, str]:
    """`config.rl.teachers` → {key: dir}: "math=/runs/sft,if/instruct=/runs/stage1_short".

    A string rather than a nested section so the cascade and the command line
    can set it in one override; each dir is a finished stage dir or an export
    (`checkpointing.resolve_params_dir`). A key is a domain (its teacher in
    every mode) or `domain/mode` (that mode only, before the domain's own
    entry). Several keys may share a dir.
    """
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, path = (s.strip() for s in item.partition("="))
        _check(
            bool(sep and key and path),
            f"config.rl.teachers: expected 'domain[/mode]=dir[,...]', got {item!r}",
        )
        domain, slash, mode = key.partition("/")
        _check(
            domain in tasks_base.DOMAINS,
            f"config.rl.teachers has domain {domain!r}; valid {tasks_base.DOMAINS}",
        )
        _check(
            not slash or mode in tasks_base.MODES,
            f"config.rl.teachers key {key!r}: the mode after '/' is one of {tasks_base.MODES}",
        )
        _check(key not in out, f"config.rl.teachers names {key!r} twice")
        out[key] = path
    return out


def teacher_key(teachers: typing.Container[str], domain: str, mode: str) -> str | None:
    """The `parse_teachers` key that serves `domain` in `mode`: `domain/mode`, else `domain`."""
    for key in (f"{domain}/{mode}", domain):
        if key in teachers:
            return key
    return None


def _validate_prompt_curriculum(cfg: Config):
    """A sub-stage's prompt limit leaves room for its responses; its levels exist."""
    for i, c in enumerate(cfg.rl.curriculum):
        _check(
            c.max_prompt_tokens + c.max_new_tokens <= cfg.model.max_seq_len,
            f"config.rl.curriculum[{i}].max_prompt_tokens={c.max_prompt_tokens} + "
            f"max_new_tokens={c.max_new_tokens} exceed config.model.max_seq_len="
            f"{cfg.model.max_seq_len}",
        )
        if not c.levels or cfg.data.files:
            continue  # record files: levels are their records' `difficulty` fields
        for domain in cfg.rl.domains:
            rl_levels = tasks_registry.difficulty_levels(domain, "rl")
            _check(
                bool(set(c.levels) & set(rl_levels)),
                f"config.rl.curriculum[{i}].levels={c.levels} leaves no {domain} prompt "
                f"(its RL levels are {rl_levels})",
            )


def _validate_rm(cfg: Config):
    m = cfg.rm
    _check(0.0 <= m.noise < 0.5, f"config.rm.noise must be in [0, 0.5), got {m.noise}")
    _check(m.epochs > 0, f"config.rm.epochs must be > 0, got {m.epochs}")
    _check(
        0.0 < m.rows_per_pair <= 1.0,
        f"config.rm.rows_per_pair must be in (0, 1], got {m.rows_per_pair}",
    )
    _check(
        cfg.stage != "rm" or not cfg.data.files or bool(cfg.data.eval_files),
        "config.data.eval_files (held-out preference pairs) is required with config.data.files",
    )


def _validate_cascade(c: CascadeConfig):
    orders = stage_registry.ORDERS
    _check(c.order in orders, f"config.cascade.order={c.order!r}; choose from {sorted(orders)}")
    unknown = [s for s in c.stages if s not in STAGES or s == "cascade"]
    _check(not unknown, f"config.cascade.stages: unknown stage names {unknown}; stages {STAGES}")
    _check(
        c.forgetting_tolerance >= 0,
        f"config.cascade.forgetting_tolerance must be >= 0, got {c.forgetting_tolerance}",
    )


def _validate_rl(r: RLConfig):
    _check(
        not r.rm_bonus or r.reward != "rm",
        "config.rl.rm_bonus adds a reward-model bonus to verifier rewards; config.rl.reward='rm'",
    )
    _check(
        not (r.rm_bonus and r.dynamic_filter == "epoch"),
        "config.rl.rm_bonus rewards exceed 1, which config.rl.dynamic_filter='epoch' reads as "
        "solved; use 'batch' or 'none'",
    )
    if r.reward_fn:
        from nemocascade.rewards import registry  # imports the plug-in module

        _check(not r.reward, f"config.rl.reward_fn and config.rl.reward={r.reward!r} both set")
        try:
            registry.load_plugin(r.reward_fn)
        except ValueError as e:
            _check(False, f"config.rl.reward_fn: {e}")
    _check(0 <= r.swe_shaping <= 1, f"config.rl.swe_shaping must be in [0, 1], got {r.swe_shaping}")
    if r.swe_judge:
        from nemocascade.rewards import swe_patch  # imports the judge's module

        try:
            swe_patch.load_judge(r.swe_judge)
        except ValueError as e:
            _check(False, f"config.rl.swe_judge: {e}")
    for dom in r.domains:
        _check(
            dom in tasks_base.DOMAINS, f"config.rl.domains has {dom!r}; valid {tasks_base.DOMAINS}"
        )
    _check(
        not r.domain_weights
        or (len(r.domain_weights) == len(r.domains) and all(w > 0 for w in r.domain_weights)),
        f"config.rl.domain_weights={r.domain_weights} needs one positive weight per domain "
        f"of config.rl.domains={r.domains}",
    )
    _check(r.mode in RL_MODES, f"config.rl.mode={r.mode!r}; choose from {RL_MODES}")
    _check(r.group_size >= 2, f"config.rl.group_size must be >= 2, got {r.group_size}")
    _check(r.prompts_per_step > 0, "config.rl.prompts_per_step must be > 0")
    _check(r.temperature > 0, f"config.rl.temperature must be > 0, got {r.temperature}")
    _check(0 < r.top_p <= 1, f"config.rl.top_p must be in (0, 1], got {r.top_p}")
    _check(r.top_k >= 0, "config.rl.top_k must be >= 0 (0 disables)")
    _check(r.max_new_tokens > 0, "config.rl.max_new_tokens must be > 0")
    _check(r.overlong in OVERLONG, f"config.rl.overlong={r.overlong!r}; choose from {OVERLONG}")
    _check(
        r.engine in groups.ENGINES,
        f"config.rl.engine={r.engine!r}; choose from {groups.ENGINES}",
    )
    _check(r.engine_slots > 0, f"config.rl.engine_slots must be > 0, got {r.engine_slots}")
    _check(r.updates_per_batch >= 1, "config.rl.updates_per_batch must be >= 1")
    _check(
        r.updates_per_batch == 1 or (r.top_k == 0 and r.top_p == 1),
        "config.rl.updates_per_batch > 1 takes the sampler's log-probs as π_old, which equal "
        "the trainer's only without truncation: set config.rl.top_k=0 and config.rl.top_p=1",
    )
    _check(
        r.dynamic_filter in DYNAMIC_FILTERS,
        f"config.rl.dynamic_filter={r.dynamic_filter!r}; choose from {DYNAMIC_FILTERS}",
    )
    _check(
        r.refill_max_batches >= 1,
        f"config.rl.refill_max_batches must be >= 1, got {r.refill_max_batches}",
    )
    _check(
        r.advantage in advantages.MODES,
        f"config.rl.advantage={r.advantage!r}; choose from {advantages.MODES}",
    )
    _check(
        r.reward_shaping in ("none", *advantages.SHAPINGS),
        f"config.rl.reward_shaping={r.reward_shaping!r}; choose from none, {advantages.SHAPINGS}",
    )
    _check(
        r.aggregation in policy.AGGREGATIONS,
        f"config.rl.aggregation={r.aggregation!r}; choose from {policy.AGGREGATIONS}",
    )
    _check(r.kl_kind in kl.KINDS, f"config.rl.kl_kind={r.kl_kind!r}; choose from {kl.KINDS}")
    _check(r.kl_coef >= 0, f"config.rl.kl_coef must be >= 0, got {r.kl_coef}")
    _check(r.entropy_coef >= 0, f"config.rl.entropy_coef must be >= 0, got {r.entropy_coef}")
    _check(0 <= r.clip_low < 1, f"config.rl.clip_low must be in [0, 1), got {r.clip_low}")
    _check(r.clip_high >= 0, f"config.rl.clip_high must be >= 0, got {r.clip_high}")
    _check(
        r.dual_clip == 0 or r.dual_clip > 1,
        f"config.rl.dual_clip must be 0 (off) or > 1, got {r.dual_clip}",
    )
    for i, c in enumerate(r.curriculum):
        _check(
            c.steps > 0 and c.max_new_tokens > 0 and c.temperature > 0,
            f"config.rl.curriculum[{i}] needs positive steps, max_new_tokens, temperature",
        )
        _check(
            c.max_prompt_tokens >= 0,
            f"config.rl.curriculum[{i}].max_prompt_tokens must be >= 0 (0 = no limit), "
            f"got {c.max_prompt_tokens}",
        )
        _check(
            all(lv >= 0 for lv in c.levels) and len(set(c.levels)) == len(c.levels),
            f"config.rl.curriculum[{i}].levels={c.levels}: distinct levels >= 0, or () for all",
        )
    _check(
        r.length_group_window >= 0 and r.length_group_window % r.prompts_per_step == 0,
        f"config.rl.length_group_window={r.length_group_window} must be 0 (off) or a "
        f"positive multiple of config.rl.prompts_per_step={r.prompts_per_step}",
    )
    parse_teachers(r.teachers)


def _as_dict(obj) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            v = _as_dict(v)
        elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            v = [_as_dict(x) for x in v]
        out[f.name] = v
    return out


def defaults(stage: str, preset: str) -> dict[str, Any]:
    """Every field with its default, as nested dicts (config files start from this).

    Listing every field in the ConfigDict makes each one overridable from the
    command line (`--config.rl.lr=...`), while a misspelled override is
    rejected by name by the flag parser.
    """
    sections = _as_dict(_ConfigSections(stage=stage))
    # Model fields default to None = "the preset's value", so changing the
    # preset alone switches every shape field with it.
    hints = typing.get_type_hints(presets.ModelConfig)
    model = {
        "preset": preset,
        **{
            f.name: config_dict.placeholder(hints[f.name])
            for f in dataclasses.fields(presets.ModelConfig)
        },
    }
    return {**sections, "model": model}


CHECKPOINT_PRESET = "checkpoint"
MODEL_CONFIG_FILE = "model_config.json"


def checkpoint_model(init_from: str, **overrides) -> presets.ModelConfig:
    """`model.preset="checkpoint"`: the shape in `model_config.json` beside `init.init_from`.

    `convert --from_hf` and every stage write that file, so any converted
    Qwen3/Llama size runs without a preset of its own.
    """
    if not init_from:
        raise ValueError("preset='checkpoint' needs config.init.init_from")
    here = epath.Path(init_from)
    for d in (here, here.parent):
        if (d / MODEL_CONFIG_FILE).exists():
            fields = json.loads((d / MODEL_CONFIG_FILE).read_text())
            return dataclasses.replace(presets.ModelConfig(**fields), **overrides)
    raise ValueError(f"preset='checkpoint': no {MODEL_CONFIG_FILE} in {init_from} or its parent")


def from_config_dict(cd: Any) -> Config:
    """ConfigDict (from a config file) → validated `Config`."""
    cd = dict(cd.items())
    _check("stage" in cd, "config.stage is missing")
    model_cd = {k: v for k, v in cd.pop("model", {}).items() if v is not None}
    preset = model_cd.pop("preset", "tiny")
    try:
        if preset == CHECKPOINT_PRESET:
            init = cd.get("init") or {}
            model = checkpoint_model(init.get("init_from") or "", **model_cd)
        else:
            model = presets.get_preset(preset, **model_cd)
    except ValueError as e:
        raise ConfigError(f"config.model: {e}") from None
    cfg = build(_ConfigSections, cd, "config")
    cfg = Config(
        model=model,
        **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(_ConfigSections)},
    )
    return validate(cfg)


def from_dict(d: dict[str, Any]) -> Config:
    """The typed config from `dataclasses.asdict(cfg)` (a stage's `config.json`)."""
    d = dict(d)
    try:
        model = presets.ModelConfig(**d.pop("model"))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"config.model: {e}") from None
    for name, section in (d.pop("extra", None) or {}).items():  # configs written before 0.3
        if name in ("rm", "cascade"):
            d[name] = section
    sections = build(_ConfigSections, d, "config")
    cfg = Config(
        model=model,
        **{f.name: getattr(sections, f.name) for f in dataclasses.fields(_ConfigSections)},
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
