"""What every stage sets up the same way: mesh, optimizer, sharded state, logs, checkpoints."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import jax
from etils import epath

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.data import text
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"


@dataclasses.dataclass
class Runtime:
    cfg: config_lib.Config
    stage_dir: str
    mesh: jax.sharding.Mesh
    rules: rules_lib.Rules
    tx: Any
    abstract_state: Any
    state_shardings: Any
    manager: checkpointing.Manager
    writer: metrics_lib.Writer

    def close(self):
        self.manager.close()
        self.writer.close()


def check_sources(cfg: config_lib.Config) -> None:
    """Without the task world (`:8b`/`:14b`), a run needs its data and its checkpoint."""
    if cfg.data.task_world:
        return
    if not cfg.data.files:
        raise config_lib.ConfigError(
            "config.data.files is empty: with config.data.task_world=False (the :8b/:14b "
            "variants) a run trains on your records (docs/data.md), e.g. "
            "--config.data.files=/data/train.jsonl (--config.data.task_world=True: the toy world)"
        )
    if not cfg.init.init_from and not cfg.init.resume_from:
        raise config_lib.ConfigError(
            "config.init.init_from is empty: a real-model run starts from a converted "
            "checkpoint (python -m nemocascade.convert --from_hf=HF_DIR --to=CKPT, then "
            "--config.init.init_from=CKPT)"
        )


def modes_in_use(cfg: config_lib.Config) -> set[str]:
    rl_modes = set(cfg.rl.train_modes)
    eval_modes = set(cfg.eval.modes) if cfg.eval.num_per_domain > 0 else set()
    if cfg.stage == "sft":
        return set(cfg.data.modes) | eval_modes
    return rl_modes | eval_modes


def _resolve_text(cfg: config_lib.Config, stage_dir: str | None) -> text.Text:
    d = cfg.data
    init_from = cfg.init.init_from
    check_sources(cfg)
    tok, source = text.load_tokenizer(d.tokenizer, init_from)
    if stage_dir is not None:
        field = f"config.data.tokenizer={d.tokenizer or '(default)'}"
        text.check_same(tok, stage_dir, "the stage directory", field)
    template = text.load_template(
        d.chat_template, source, tok=tok, style=d.template_style, mode_switch=d.mode_switch
    )
    text.check_model(tok, cfg.model, modes_in_use(cfg))
    if stage_dir is not None and source != text.BUILTIN:
        text.save(source, stage_dir, template)
    logging.info(
        "[%s] tokenizer %s (%s), chat template %s",
        cfg.stage,
        tok.name,
        source,
        getattr(template, "origin", "") or f"builtin {getattr(template, 'style', '')}",
    )
    return text.Text(tok, template, source)


def text_for(cfg: config_lib.Config, stage_dir: str | None = None) -> text.Text:
    """The run's tokenizer and chat template (`data/text.py`), checked against the config and
    the checkpoint; copies the tokenizer files into `stage_dir`.

    Checked against `init.init_from` and, on a rerun, `stage_dir`'s own copy; a
    problem is a ConfigError naming the field, before anything compiles.
    """
    try:
        return _resolve_text(cfg, stage_dir)
    except text.TextError as e:
        raise config_lib.ConfigError(str(e)) from None


def stage_dir(workdir: str, stage: str) -> str:
    """`workdir/stage`; a local workdir is made absolute, a URI (`gs://…`) kept as it is."""
    return f"{checkpointing.absolute(workdir).rstrip('/')}/{stage}"


_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain", "nemocascade")


def _git_commit() -> str | None:
    """The commit of the code that runs, when it runs from a git checkout."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def run_record(mesh: jax.sharding.Mesh) -> dict:
    """What ran where: command line, package versions, git commit, devices and mesh."""
    import importlib.metadata
    import sys

    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    devices = jax.devices()
    return {
        "argv": list(sys.argv),
        "python": sys.version.split()[0],
        "versions": versions,
        "git_commit": _git_commit(),
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "num_processes": jax.process_count(),
        "mesh": dict(mesh.shape),
    }


def config_json(cfg: config_lib.Config) -> str:
    """The resolved config as JSON (`config.json`; `config.from_dict` reads it back)."""
    return json.dumps(dataclasses.asdict(cfg), indent=1, default=str)


def write_run_files(cfg: config_lib.Config, directory: str, mesh=None) -> None:
    """`config.json` (the resolved config), `model_config.json` (the shape) and, with
    the mesh, `run.json` (`run_record`) of a stage; process 0 writes them."""
    if jax.process_index() != 0:
        return
    d = epath.Path(directory)
    (d / CONFIG_FILE).write_text(config_json(cfg))
    model = json.dumps(dataclasses.asdict(cfg.model), indent=2)
    (d / config_lib.MODEL_CONFIG_FILE).write_text(model)
    if mesh is not None:
        (d / RUN_FILE).write_text(json.dumps(run_record(mesh), indent=1))


def wandb_settings(cfg: config_lib.Config) -> dict | None:
    """`wandb.init` arguments of a stage (None unless `train.wandb_project` is set)."""
    t = cfg.train
    if not t.wandb_project:
        return None
    settings = {
        "project": t.wandb_project,
        "name": cfg.stage,
        "config": json.loads(config_json(cfg)),
    }
    if t.wandb_mode:
        settings["mode"] = t.wandb_mode
    return settings


def setup(cfg: config_lib.Config, workdir: str, total_steps: int | None = None) -> Runtime:
    config_lib.check_devices(cfg, jax.device_count())
    directory = stage_dir(workdir, cfg.stage)
    epath.Path(directory).mkdir(parents=True, exist_ok=True)
    mesh = mesh_lib.make_mesh(cfg.mesh.shape)
    write_run_files(cfg, directory, mesh)
    rules = rules_lib.get_rules(cfg.mesh.rules)
    tx = optimizer.make(cfg.optim, total_steps or cfg.train.steps)
    abstract, shardings = state_lib.abstract_state(cfg.model, tx, mesh, rules)
    manager = checkpointing.Manager(
        os.path.join(directory, "checkpoints"), keep=cfg.train.keep_checkpoints
    )
    writer = metrics_lib.Writer(directory, wandb=wandb_settings(cfg))
    writer.text("config", config_json(cfg))
    logging.info(
        "[%s] model %.2fM params, mesh %s, rules %s, workdir %s",
        cfg.stage,
        cfg.model.num_params / 1e6,
        dict(mesh.shape),
        cfg.mesh.rules,
        directory,
    )
    return Runtime(cfg, directory, mesh, rules, tx, abstract, shardings, manager, writer)


def init_state(rt: Runtime) -> tuple[Any, dict, str]:
    """Train state by the resume order of `checkpointing`."""
    cfg = rt.cfg
    rng = jax.random.key(cfg.train.seed)

    def fresh():
        return state_lib.create(cfg.model, rt.tx, rt.mesh, rt.rules, rng)

    def with_params(params):
        init = jax.jit(lambda p: state_lib.from_params(p, rt.tx), out_shardings=rt.state_shardings)
        with jax.set_mesh(rt.mesh):
            return init(params)

    state, data, where = restore(rt, fresh, with_params, cfg.init.init_from)
    logging.info("[%s] state from %s", cfg.stage, where)
    return state, data, where


def start_params(rt: Runtime, state, where: str) -> Any:
    """The params the stage started from (RL's KL reference), whatever `init_state` restored.

    `state.params` when the stage starts now (`where` from `init_state`); after a
    resume (own checkpoint, `init.resume_from`) the params of `init.init_from`
    again, or the seed's fresh init without one, so a resumed stage regularizes
    toward the same policy as an uninterrupted one.
    """
    if not checkpointing.is_resume(where):
        return state.params
    cfg = rt.cfg
    logging.info(
        "[%s] start params (KL reference) from %s", cfg.stage, cfg.init.init_from or "scratch"
    )
    if cfg.init.init_from:
        return checkpointing.load_params(cfg.init.init_from, rt.abstract_state.params)
    rng = jax.random.key(cfg.train.seed)
    return state_lib.create(cfg.model, rt.tx, rt.mesh, rt.rules, rng).params


def restore(rt: Runtime, fresh, with_params, init_from: str) -> tuple[Any, dict, str]:
    """`checkpointing.restore_or_init` on the stage's manager and abstract state."""
    return checkpointing.restore_or_init(
        rt.manager,
        rt.abstract_state,
        resume_from=rt.cfg.init.resume_from,
        init_from=init_from,
        init_fresh=fresh,
        with_params=with_params,
    )
