"""RL stage with verifiable rewards (and RLHF with a reward model): strictly on-policy GRPO.

Each step: draw `prompts_per_step` prompts → sample `group_size` responses
each with the current params (same mesh, no weight transfer) → score them
(verifier pool, or the reward model) → overlong handling, group advantages,
dynamic filtering → exactly one optimizer step (micro-batched). The importance
ratio is exp(logp − stop_grad(logp)) ≡ 1, so the update is REINFORCE with
group-normalized advantages and a token-mean loss, as in the paper.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import jax
import numpy as np

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.data import text
from nemocascade.losses import kl as kl_lib, policy
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward, preemption, rl_batch
from nemocascade.trainer.stages import common, evaluation, guard as guard_lib, onpolicy, rewarders


def make_loss_fn(cfg: config_lib.Config, temperature: float):
    """GRPO surrogate (+ optional KL and entropy terms sharing its denominator)."""
    rl, impl = cfg.rl, cfg.train.logprob_impl or None

    def loss_fn(params, batch, rng):
        del rng
        logp, ent = forward.sequence_logprobs(
            params,
            cfg.model,
            batch,
            temperature=temperature,
            implementation=impl,
            compute_entropy=True,
        )
        mask = batch["loss_mask"]
        num, den, m = policy.policy_loss(
            logp,
            jax.lax.stop_gradient(logp),
            batch["advantages"],
            mask,
            clip_low=rl.clip_low,
            clip_high=rl.clip_high,
            dual_clip=rl.dual_clip or None,
            aggregation=rl.aggregation,
        )
        if rl.kl_coef > 0 and not rl.kl_in_reward:
            kn, _ = kl_lib.kl_penalty(
                logp, batch["ref_logprobs"], mask, kind=rl.kl_kind, aggregation=rl.aggregation
            )
            num = num + rl.kl_coef * kn
        if rl.entropy_coef > 0:
            en, _ = policy.entropy_bonus(ent, mask, rl.entropy_coef, rl.aggregation)
            num = num + en
        fmask = mask.astype(np.float32)
        tokens = fmask.sum()
        metrics = dict(m)
        metrics["entropy"] = ((jax.lax.stop_gradient(ent) * fmask).sum(), tokens)
        gap = jax.numpy.abs(jax.lax.stop_gradient(logp) - batch["sampler_logprobs"])
        metrics["sampler_logprob_gap"] = ((gap * fmask).sum(), tokens)
        return num, (den, metrics)

    return loss_fn


class _Reference:
    """The frozen initial policy: forward-only log-probs for the KL term (no residuals)."""

    def __init__(self, cfg: config_lib.Config, rt: common.Runtime, params):
        self._params = jax.tree.map(lambda x: x.copy(), params)  # survives donation of state
        self._rt = rt
        impl = cfg.train.logprob_impl or None

        def logprobs(p, batch, temperature):
            logp, _ = forward.sequence_logprobs(
                p, cfg.model, batch, temperature=temperature, implementation=impl
            )
            return jax.lax.stop_gradient(logp)

        self._fn = jax.jit(logprobs, static_argnums=2)

    def logprobs(self, batch: dict, temperature: float) -> np.ndarray:
        keys = ("inputs", "targets", "positions", "segment_ids")
        placed = rules_lib.put_batch({k: batch[k] for k in keys}, self._rt.mesh, self._rt.rules)
        with jax.set_mesh(self._rt.mesh):
            return np.asarray(self._fn(self._params, placed, temperature))


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    stage_dir = common.stage_dir(workdir, cfg.stage)
    if checkpointing.is_done(stage_dir):
        logging.info("[%s] already finished (%s); skipping", cfg.stage, stage_dir)
        return {}
    rl = cfg.rl
    tok, template, _ = text.for_config(cfg, stage_dir)
    rt = common.setup(cfg, workdir)
    state, data_state, _ = common.init_state(rt)
    stream = onpolicy.make_stream(cfg, data_state, tok, template)
    rewarder = rewarders.make(cfg, workdir, rt, tok, template)
    step_fn = onpolicy.train_steps(cfg, rt, make_loss_fn)

    reference = _Reference(cfg, rt, state.params) if rl.kl_coef > 0 else None
    own_eval = evaluation.own_domain_eval(cfg, tok, template, rt)
    batch_shards = rules_lib.batch_shards(rt.mesh, rt.rules)
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
            phase = onpolicy.phase_at(rl, step)
            t0 = time.perf_counter()
            examples = stream.next_batch()
            rollouts = onpolicy.sample_student(
                cfg, rt, tok, template, state.params, examples, phase, jax.random.fold_in(key, step)
            )
            t1 = time.perf_counter()
            scores = rewarder(examples, rollouts)
            t2 = time.perf_counter()
            if reference is not None:
                rollouts.batch["ref_logprobs"] = reference.logprobs(
                    rollouts.batch, phase.temperature
                )
                if rl.kl_in_reward:
                    scores, kl_b = kl_lib.kl_in_reward(
                        scores,
                        rollouts.batch["sampler_logprobs"],
                        rollouts.batch["ref_logprobs"],
                        rollouts.batch["loss_mask"],
                        coef=rl.kl_coef,
                        kind=rl.kl_kind,
                    )
                    scores = np.asarray(scores)
            prepared = rl_batch.prepare(
                rl, rollouts.batch, scores, rollouts.truncated, rl.group_size
            )
            in_loss = prepared.batch["loss_mask"].any(-1)
            onpolicy.check_finite_inputs(
                cfg,
                rt,
                step,
                rewards=prepared.rewards,
                advantages=prepared.batch["advantages"][in_loss],
            )
            stream.record(examples, prepared.rewards.reshape(-1, rl.group_size).mean(-1).tolist())
            train_batch = prepared.batch
            if jax.process_count() == 1:
                train_batch = rl_batch.compact(
                    train_batch, cfg.train.num_microbatches * batch_shards, length_multiple=32
                )
            batch = rules_lib.put_batch(train_batch, rt.mesh, rt.rules)
            state, m = step_fn(phase.temperature)(state, batch, key)
            services.after(step, m)
            host = metrics_lib.to_python(m)
            t3 = time.perf_counter()
            onpolicy.check_finite(cfg, rt, host, step)
            lengths = rollouts.lengths
            host.update(prepared.metrics)
            host.update(
                response_len_mean=float(lengths.mean()),
                response_len_max=float(lengths.max()),
                max_new_tokens=phase.max_new_tokens,
                temperature=phase.temperature,
                rollout_s=t1 - t0,
                verify_s=t2 - t1,
                train_s=t3 - t2,
                rollout_tokens_per_s=float(lengths.sum()) / max(t1 - t0, 1e-9),
                train_rows=len(train_batch["loss_mask"]),
                train_len=train_batch["loss_mask"].shape[1],
                prompts_skipped=stream.skipped,
            )
            bar.update(1, reward=host["reward_mean"], len=host["response_len_mean"])
            onpolicy.after_step(cfg, rt, step, state, stream, host, own_eval, bar)
            services.check(step, cfg.train.steps, state, stream.get_state, rt.manager)
            if guard is not None and onpolicy.guard_stops(cfg, guard, step, state, stream):
                state = guard.restore_last_passing(step)
                break
    bar.close()
    final = onpolicy.finish(cfg, rt, tok, template, state, stream.get_state(), own_eval)
    if guard is not None:
        guard.close()
    rewarder.close()
    rt.close()
    return final
