"""Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2 §4.4): the `mopd` stage.

Each step: draw `prompts_per_step` prompts of `rl.domains` → sample
`group_size` responses each with the current params (the student, π_inf) →
score every response once with its domain's frozen teacher
(`config.rl.teachers`, forward-only log-probs of the sampled tokens) →
exactly one optimizer step on `losses.distill.mopd_loss`, whose token
advantage is log π_teacher − log π_train (a reverse-KL estimate; no reward,
no group baseline) with the truncated importance weight π_train/π_inf.

Teacher and student log-probs use the sampling temperature, so a teacher
equal to the student gives advantage 0 exactly, and the paper's setting
(temperature 1.0) scores the plain teacher. LR warm-up (0.1× → 1×) comes from
`optim.warmup_steps` / `optim.warmup_init_ratio`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from nemocascade import config as config_lib
from nemocascade.data import text
from nemocascade.losses import distill
from nemocascade.rollout import rows as rows_lib
from nemocascade.trainer import forward, optimizer
from nemocascade.trainer.onpolicy import driver, parts, rl_batch, teachers as teachers_lib


def teacher_dirs(r: config_lib.RLConfig) -> dict[str, str]:
    """{key: teacher dir} serving every `rl.domains` entry in every sampled mode.

    A key is a domain or `domain/mode` (`config.parse_teachers`); ConfigError
    naming the domain and mode without one.
    """
    dirs = config_lib.parse_teachers(r.teachers)
    used, missing = {}, []
    for d in r.domains:
        keys = {m: config_lib.teacher_key(dirs, d, m) for m in r.train_modes}
        unserved = [m for m, k in keys.items() if k is None]
        missing += [d] if len(unserved) == len(keys) else [f"{d}/{m}" for m in unserved]
        used.update({k: dirs[k] for k in keys.values() if k is not None})
    if missing:
        raise config_lib.ConfigError(
            f"config.rl.teachers={r.teachers!r} has no teacher for {missing} of "
            f"config.rl.domains={r.domains} (mode {r.mode!r}); set e.g. --config.rl.teachers="
            + ",".join(f"{d}=DIR/<stage>" for d in r.domains)
        )
    return used


def check_config(r: config_lib.RLConfig):
    """Rejects RL options MOPD has no use for, rather than ignoring them silently."""
    unused = {
        "reward": r.reward != "",
        "dynamic_filter": r.dynamic_filter != "none",
        "kl_coef": r.kl_coef != 0,
        "entropy_coef": r.entropy_coef != 0,
        "overlong": r.overlong not in ("none", "filter"),
    }
    bad = [f"config.rl.{k}" for k, v in unused.items() if v]
    if bad:
        raise config_lib.ConfigError(
            f"{bad} not used by MOPD (no reward, no KL/entropy term; overlong is none|filter)"
        )


def make_loss_fn(cfg: config_lib.Config, temperature: float):
    """MOPD loss on the student's training-engine log-probs at the sampling temperature."""
    impl = cfg.train.logprob_impl or None

    def loss_fn(params, batch, rng):
        del rng
        logp, _ = forward.sequence_logprobs(
            params, cfg.model, batch, temperature=temperature, implementation=impl
        )
        mask = batch["loss_mask"]
        num, den, m = distill.mopd_loss(
            logp, batch["teacher_logprobs"], batch["sampler_logprobs"], mask
        )
        fmask = mask.astype(np.float32)
        gap = jax.numpy.abs(jax.lax.stop_gradient(logp) - batch["sampler_logprobs"])
        metrics = dict(m)
        metrics["sampler_logprob_gap"] = ((gap * fmask).sum(), fmask.sum())
        return num, (den, metrics)

    return loss_fn


def teacher_gaps(
    teacher_bt: np.ndarray, sampler_bt: np.ndarray, mask_bt: np.ndarray, row_keys: Sequence[str]
) -> dict[str, float]:
    """Per teacher key (a domain, or `domain/mode`), the mean teacher − sampler
    log-prob over valid tokens: each teacher's gap, `teacher_gap/<key>`."""
    out = {}
    for key in sorted(set(row_keys)):
        rows = np.asarray([x == key for x in row_keys])
        m = mask_bt[rows].astype(np.float32)
        diff = (teacher_bt[rows] - sampler_bt[rows]) * m
        out[f"teacher_gap/{key}"] = float(diff.sum() / max(m.sum(), 1.0))
    return out


class MOPD:
    """The distillation algorithm of the on-policy driver: teacher log-probs → the MOPD loss."""

    make_loss_fn = staticmethod(make_loss_fn)

    def __init__(self, cfg: config_lib.Config, workdir: str, rt, tok, template, start_params):
        del workdir, template, start_params  # the teachers are the references
        self._cfg, self._rt = cfg, rt
        dirs = teacher_dirs(cfg.rl)
        for key, d in dirs.items():  # teachers share the student's tokenizer (C2 §4.4)
            try:
                text.check_same(tok, d, f"the {key} teacher", "the student's tokenizer")
            except text.TextError as e:
                raise config_lib.ConfigError(str(e)) from None
        self._teachers = teachers_lib.Teachers(
            cfg.model,
            dirs,
            abstract_params=rt.abstract_state.params,
            mesh=rt.mesh,
            rules=rt.rules,
            implementation=cfg.train.logprob_impl or None,
        )
        logging.info("[%s] teachers: %s", cfg.stage, dirs)
        self._lr_at = optimizer.schedule(cfg.optim, cfg.train.steps)

    def prepare(self, step, examples, rollouts, phase, draw) -> driver.Prepared:
        del draw  # MOPD trains on the step's own prompts
        r = self._cfg.rl
        t0 = time.perf_counter()
        row_domains = [examples[i].domain for i in rollouts.example_index]
        modes = parts.modes_for(r, len(examples))
        row_modes = [modes[i] for i in rollouts.example_index]
        policy_rows = rollouts.batch
        if r.overlong == "filter":
            policy_rows = policy_rows.replace(
                loss_mask=policy_rows.loss_mask * (~rollouts.truncated)[:, None]
            )
        if jax.process_count() == 1:
            policy_rows = rows_lib.PolicyRows(**rl_batch.trim_columns(policy_rows, 32))
        row_keys = self._teachers.keys(row_domains, row_modes)
        teacher_bt = self._teachers.logprobs(policy_rows, row_keys, phase.temperature)
        teacher_s = time.perf_counter() - t0
        batch = rows_lib.train_batch(policy_rows, teacher_logprobs=teacher_bt)
        valid = np.asarray(batch["loss_mask"]) > 0
        parts.check_finite_inputs(
            self._cfg, self._rt, step, teacher_logprobs=np.asarray(teacher_bt)[valid]
        )
        metrics = teacher_gaps(teacher_bt, batch["sampler_logprobs"], batch["loss_mask"], row_keys)
        metrics.update(
            lr=float(self._lr_at(step - 1)),
            truncation_rate=float(rollouts.truncated.mean()),
            teacher_s=teacher_s,
        )
        return driver.Prepared(batch, metrics)

    def progress(self, host: dict) -> dict:
        return {"adv": host["advantage_mean"]}

    def close(self) -> None:
        pass


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) the MOPD stage with the on-policy driver."""
    teacher_dirs(cfg.rl)  # fails before any set-up without a teacher per domain
    check_config(cfg.rl)
    return driver.run(cfg, workdir, MOPD)
