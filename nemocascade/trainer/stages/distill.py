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

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.data import text
from nemocascade.losses import distill
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward, optimizer, preemption, rl_batch, teachers as teachers_lib
from nemocascade.trainer.stages import common, evaluation, guard as guard_lib, onpolicy

TRAIN_KEYS = ("inputs", "targets", "positions", "segment_ids", "loss_mask", "sampler_logprobs")


def teacher_dirs(r: config_lib.RLConfig) -> dict[str, str]:
    """{domain: teacher dir} for every `rl.domains` entry; ConfigError on a missing one."""
    dirs = config_lib.parse_teachers(r.teachers)
    missing = [d for d in r.domains if d not in dirs]
    if missing:
        raise config_lib.ConfigError(
            f"config.rl.teachers={r.teachers!r} has no teacher for domain(s) {missing} of "
            f"config.rl.domains={r.domains}; set e.g. --config.rl.teachers="
            + ",".join(f"{d}=DIR/<stage>" for d in r.domains)
        )
    return {d: dirs[d] for d in r.domains}


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


def domain_gaps(
    teacher_bt: np.ndarray, sampler_bt: np.ndarray, mask_bt: np.ndarray, row_domains: Sequence[str]
) -> dict[str, float]:
    """Per domain, mean teacher − sampler log-prob over valid tokens (each teacher's gap)."""
    out = {}
    for d in sorted(set(row_domains)):
        rows = np.asarray([x == d for x in row_domains])
        m = mask_bt[rows].astype(np.float32)
        diff = (teacher_bt[rows] - sampler_bt[rows]) * m
        out[f"teacher_gap/{d}"] = float(diff.sum() / max(m.sum(), 1.0))
    return out


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    stage_dir = common.stage_dir(workdir, cfg.stage)
    if checkpointing.is_done(stage_dir):
        logging.info("[%s] already finished (%s); skipping", cfg.stage, stage_dir)
        return {}
    r = cfg.rl
    dirs = teacher_dirs(r)
    check_config(r)
    tok, template, _ = text.for_config(cfg, stage_dir)
    for domain, d in dirs.items():  # teachers share the student's tokenizer (C2 §4.4)
        text.check_same(tok, d, f"the {domain} teacher", "the student's tokenizer")
    rt = common.setup(cfg, workdir)
    state, data_state, _ = common.init_state(rt)
    stream = onpolicy.make_stream(cfg, data_state, tok, template)
    teachers = teachers_lib.Teachers(
        cfg.model,
        dirs,
        abstract_params=rt.abstract_state.params,
        mesh=rt.mesh,
        rules=rt.rules,
        implementation=cfg.train.logprob_impl or None,
    )
    logging.info("[%s] teachers: %s", cfg.stage, dirs)
    lr_at = optimizer.schedule(cfg.optim, cfg.train.steps)
    step_fn = onpolicy.train_steps(cfg, rt, make_loss_fn)

    own_eval = evaluation.own_domain_eval(cfg, tok, template, rt)
    start = int(jax.device_get(state.step))
    if start == 0:
        rt.writer.write(0, own_eval(state.params))
    guard = guard_lib.ForgettingGuard(cfg, rt, tok, template) if cfg.eval.guard_tolerance else None
    if guard is not None:
        guard.start(state, stream.get_state())
    bar = metrics_lib.Progress(cfg.train.steps, start, cfg.stage, cfg.train.progress)
    key = jax.random.key(cfg.train.seed)
    services = preemption.StepServices(cfg.stage, cfg.train.profile_steps, f"{rt.stage_dir}/tb")
    with services:
        for step in range(start + 1, cfg.train.steps + 1):
            services.before(step)
            phase = onpolicy.phase_at(r, step)
            t0 = time.perf_counter()
            examples = stream.next_batch()
            rollouts = onpolicy.sample_student(
                cfg, rt, tok, template, state.params, examples, phase, jax.random.fold_in(key, step)
            )
            row_domains = [examples[i].domain for i in rollouts.example_index]
            t1 = time.perf_counter()
            batch = {k: rollouts.batch[k] for k in TRAIN_KEYS}
            if r.overlong == "filter":
                batch["loss_mask"] = batch["loss_mask"] * (~rollouts.truncated)[:, None]
            if jax.process_count() == 1:
                batch = rl_batch.trim_columns(batch, 32)
            teacher_bt = teachers.logprobs(batch, row_domains, phase.temperature)
            t2 = time.perf_counter()
            batch["teacher_logprobs"] = teacher_bt
            valid = np.asarray(batch["loss_mask"]) > 0
            onpolicy.check_finite_inputs(
                cfg, rt, step, teacher_logprobs=np.asarray(teacher_bt)[valid]
            )
            placed = rules_lib.put_batch(batch, rt.mesh, rt.rules)
            state, m = step_fn(phase.temperature)(state, placed, key)
            services.after(step, m)
            host = metrics_lib.to_python(m)
            t3 = time.perf_counter()
            onpolicy.check_finite(cfg, rt, host, step)
            lengths = rollouts.lengths
            host.update(
                domain_gaps(teacher_bt, batch["sampler_logprobs"], batch["loss_mask"], row_domains)
            )
            host.update(
                lr=float(lr_at(step - 1)),
                response_len_mean=float(lengths.mean()),
                response_len_max=float(lengths.max()),
                truncation_rate=float(rollouts.truncated.mean()),
                max_new_tokens=phase.max_new_tokens,
                temperature=phase.temperature,
                rollout_s=t1 - t0,
                teacher_s=t2 - t1,
                train_s=t3 - t2,
                rollout_tokens_per_s=float(lengths.sum()) / max(t1 - t0, 1e-9),
            )
            bar.update(1, adv=host["advantage_mean"], len=host["response_len_mean"])
            onpolicy.after_step(cfg, rt, step, state, stream, host, own_eval, bar)
            services.check(step, cfg.train.steps, state, stream.get_state, rt.manager)
            if guard is not None and onpolicy.guard_stops(cfg, guard, step, state, stream):
                state = guard.restore_last_passing(step)
                break
    bar.close()
    final = onpolicy.finish(cfg, rt, tok, template, state, stream.get_state(), own_eval)
    if guard is not None:
        guard.close()
    rt.close()
    return final
