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
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib


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


def stage_dir(workdir: str, stage: str) -> str:
    """`workdir/stage`; a local workdir is made absolute, a URI (`gs://…`) kept as it is."""
    return f"{checkpointing.absolute(workdir).rstrip('/')}/{stage}"


def write_run_files(cfg: config_lib.Config, directory: str) -> None:
    """`config.json` (the resolved config) and `model_config.json` (the shape) of a stage."""
    if jax.process_index() != 0:
        return
    d = epath.Path(directory)
    (d / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1, default=str))
    model = json.dumps(dataclasses.asdict(cfg.model), indent=2)
    (d / config_lib.MODEL_CONFIG_FILE).write_text(model)


def setup(cfg: config_lib.Config, workdir: str, total_steps: int | None = None) -> Runtime:
    config_lib.check_devices(cfg, jax.device_count())
    directory = stage_dir(workdir, cfg.stage)
    epath.Path(directory).mkdir(parents=True, exist_ok=True)
    write_run_files(cfg, directory)
    mesh = mesh_lib.make_mesh(cfg.mesh.shape)
    rules = rules_lib.get_rules(cfg.mesh.rules)
    tx = optimizer.make(cfg.optim, total_steps or cfg.train.steps)
    abstract, shardings = state_lib.abstract_state(cfg.model, tx, mesh, rules)
    manager = checkpointing.Manager(
        os.path.join(directory, "checkpoints"), keep=cfg.train.keep_checkpoints
    )
    writer = metrics_lib.Writer(directory)
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

    state, data, where = checkpointing.restore_or_init(
        rt.manager,
        rt.abstract_state,
        resume_from=cfg.init.resume_from,
        init_from=cfg.init.init_from,
        init_fresh=fresh,
        with_params=with_params,
    )
    logging.info("[%s] state from %s", cfg.stage, where)
    return state, data, where
