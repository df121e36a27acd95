"""RL stage with verifiable rewards (and RLHF with a reward model): strictly on-policy GRPO.

Each step: draw `prompts_per_step` prompts → sample `group_size` responses
each with the current params (same mesh, no weight transfer) → score them
(verifier pool, or the reward model) → overlong handling, group advantages,
dynamic filtering → exactly one optimizer step (micro-batched). The importance
ratio is exp(logp − stop_grad(logp)) ≡ 1, so the update is REINFORCE with
group-normalized advantages and a token-mean loss, as in the paper.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any

import jax
import numpy as np

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.data import chat_template, pipelines, tokenizer as tokenizer_lib
from nemocascade.losses import kl as kl_lib, policy
from nemocascade.rollout import engine, sampling
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward, loop, prompt_stream, rl_batch, step as step_lib
from nemocascade.trainer.stages import common, evaluation, rewarders


@dataclasses.dataclass(frozen=True)
class Phase:
    """The sampling settings in force at a step (length curriculum)."""

    max_new_tokens: int
    temperature: float


def phase_at(rl: config_lib.RLConfig, step: int) -> Phase:
    """Curriculum sub-stage of 1-based `step` (the last one extends to the end)."""
    start = 0
    for c in rl.curriculum:
        if step <= start + c.steps:
            return Phase(c.max_new_tokens, c.temperature)
        start += c.steps
    if rl.curriculum:
        last = rl.curriculum[-1]
        return Phase(last.max_new_tokens, last.temperature)
    return Phase(rl.max_new_tokens, rl.temperature)


def modes_for(rl: config_lib.RLConfig, n: int) -> list[str]:
    if rl.mode == "half_half":
        return ["thinking" if i % 2 == 0 else "instruct" for i in range(n)]
    return [rl.mode] * n


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
    tok = tokenizer_lib.Tokenizer.load()
    template = chat_template.Template(style=cfg.data.template_style)
    rt = common.setup(cfg, workdir)
    state, data_state, _ = common.init_state(rt)
    loader = pipelines.rl_prompts(
        batch_size=1,
        seed=cfg.train.seed,
        domains=rl.domains,
        num_examples=rl.num_prompts,
        path=cfg.data.jsonl or None,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )
    stream = prompt_stream.PromptStream(
        loader,
        rl.prompts_per_step // jax.process_count(),
        epoch_filter=rl.dynamic_filter == "epoch",
        resample_easy=rl.resample_easy,
        resample_hard=rl.resample_hard,
        seed=cfg.train.seed,
    )
    if data_state:
        stream.set_state(data_state)
    rewarder = rewarders.make(cfg, workdir, rt, tok)
    steps_by_temp: dict[float, Any] = {}

    def step_fn(temperature: float):
        if temperature not in steps_by_temp:
            steps_by_temp[temperature] = step_lib.make_train_step(
                make_loss_fn(cfg, temperature),
                rt.tx,
                num_microbatches=cfg.train.num_microbatches,
                mesh=rt.mesh,
                rules=rt.rules,
                state_shardings=rt.state_shardings,
            )
        return steps_by_temp[temperature]

    reference = _Reference(cfg, rt, state.params) if rl.kl_coef > 0 else None
    own_eval = evaluation.own_domain_eval(cfg, tok, template, rt)
    batch_shards = rules_lib.batch_sharding(rt.mesh, rt.rules).num_devices
    start = int(jax.device_get(state.step))
    if start == 0:
        rt.writer.write(0, own_eval(state.params))
    bar = metrics_lib.Progress(cfg.train.steps, start, cfg.stage, cfg.train.progress)
    key = jax.random.key(cfg.train.seed)
    for step in range(start + 1, cfg.train.steps + 1):
        phase = phase_at(rl, step)
        t0 = time.perf_counter()
        examples = stream.next_batch()
        method = sampling.Sample(temperature=phase.temperature, top_k=rl.top_k, top_p=rl.top_p)
        rollouts = engine.sample_groups(
            state.params,
            cfg.model,
            tok,
            examples,
            group_size=rl.group_size,
            modes=modes_for(rl, len(examples)),
            method=method,
            max_new_tokens=phase.max_new_tokens,
            rng=jax.random.fold_in(key, step),
            template=template,
            thinking_budget=rl.thinking_budget or None,
            mesh=rt.mesh,
            rules=rules_lib.get_rules("decode"),
        )
        t1 = time.perf_counter()
        scores = rewarder(examples, rollouts)
        t2 = time.perf_counter()
        if reference is not None:
            rollouts.batch["ref_logprobs"] = reference.logprobs(rollouts.batch, phase.temperature)
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
        prepared = rl_batch.prepare(rl, rollouts.batch, scores, rollouts.truncated, rl.group_size)
        stream.record(examples, prepared.rewards.reshape(-1, rl.group_size).mean(-1).tolist())
        train_batch = prepared.batch
        if jax.process_count() == 1:
            train_batch = rl_batch.compact(train_batch, cfg.train.num_microbatches * batch_shards)
        batch = rules_lib.put_batch(train_batch, rt.mesh, rt.rules)
        state, m = step_fn(phase.temperature)(state, batch, key)
        host = metrics_lib.to_python(m)
        t3 = time.perf_counter()
        for name in ("loss", "grad_norm"):
            if not math.isfinite(host[name]):
                raise loop.NonFiniteError(
                    f"[{cfg.stage}] {name} is {host[name]} at step {step}; stopping. Last good "
                    f"checkpoint: step {rt.manager.latest_step()} in {rt.manager.directory}"
                )
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
            prompts_skipped=stream.skipped,
        )
        bar.update(1, reward=host["reward_mean"], len=host["response_len_mean"])
        if step % cfg.train.log_every == 0 or step == cfg.train.steps:
            rt.writer.write(step, host)
        if step % cfg.train.checkpoint_every == 0 and step != cfg.train.steps:
            rt.manager.save(step, state, stream.get_state())
        if step % cfg.train.eval_every == 0 and step != cfg.train.steps:
            ev = own_eval(state.params)
            rt.writer.write(step, ev)
            bar.write(
                f"[{cfg.stage}] step {step}: " + ", ".join(f"{k}={v:.3f}" for k, v in ev.items())
            )
    bar.close()
    rt.manager.save(cfg.train.steps, state, stream.get_state(), force=True)
    rt.manager.wait()
    final = own_eval(state.params)
    rt.writer.write(cfg.train.steps, final)
    logging.info("[%s] final: %s", cfg.stage, final)
    evaluation.write_matrix(cfg, tok, template, rt, state.params)
    checkpointing.export_params(stage_dir, state.params, {"stage": cfg.stage, **final})
    rewarder.close()
    rt.close()
    return final
