"""RL stage with verifiable rewards (and RLHF with a reward model): strictly on-policy GRPO.

Each step: draw `prompts_per_step` prompts → sample `group_size` responses
each with the current params (same mesh, no weight transfer) → score them
(verifier pool, or the reward model) → overlong handling, group advantages,
dynamic filtering → exactly one optimizer step (micro-batched). The importance
ratio is exp(logp − stop_grad(logp)) ≡ 1, so the update is REINFORCE with
group-normalized advantages and a token-mean loss, as in the paper.

Options beside the paper's step: `rl.engine="continuous"` samples with the
continuous engine and scores verifier rewards as rows finish, while the rest
decode (`onpolicy/streaming.py`); `rl.updates_per_batch` > 1 takes that many
optimizer updates on mini-batches of the rollout batch, against the sampler's
log-probs as π_old, where the clip options take effect;
`rl.dynamic_filter="refill"` samples more prompts until the step has
`prompts_per_step` groups with non-zero reward spread (`onpolicy/refill.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from nemocascade import config as config_lib
from nemocascade.losses import kl as kl_lib, policy
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward, stage_setup
from nemocascade.trainer.onpolicy import (
    driver,
    frozen,
    parts,
    refill,
    rewarders,
    rl_batch,
    streaming,
)


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
        # Strictly on-policy (1 update per batch) π_old is π_θ itself: the ratio
        # is 1 in value. With several updates it is the sampling policy, whose
        # log-probs the sampler recorded (config: untruncated sampling only).
        old = batch["sampler_logprobs"] if rl.updates_per_batch > 1 else logp
        num, den, m = policy.policy_loss(
            logp,
            jax.lax.stop_gradient(old),
            batch["advantages"],
            mask,
            clip_low=rl.clip_low,
            clip_high=rl.clip_high,
            dual_clip=rl.dual_clip or None,
            aggregation=rl.aggregation,
        )
        metrics = dict(m)
        if rl.kl_coef > 0 and not rl.kl_in_reward:
            kn, kd = kl_lib.kl_penalty(
                logp, batch["ref_logprobs"], mask, kind=rl.kl_kind, aggregation=rl.aggregation
            )
            num = num + rl.kl_coef * kn
            metrics["kl_ref"] = (jax.lax.stop_gradient(kn), kd)  # to the stage's start
        if rl.entropy_coef > 0:
            en, _ = policy.entropy_bonus(ent, mask, rl.entropy_coef, rl.aggregation)
            num = num + en
        fmask = mask.astype(np.float32)
        tokens = fmask.sum()
        metrics["entropy"] = ((jax.lax.stop_gradient(ent) * fmask).sum(), tokens)
        gap = jax.numpy.abs(jax.lax.stop_gradient(logp) - batch["sampler_logprobs"])
        metrics["sampler_logprob_gap"] = ((gap * fmask).sum(), tokens)
        return num, (den, metrics)

    return loss_fn


class GRPO:
    """The RL algorithm of the on-policy driver: rewards → group advantages → the GRPO loss."""

    make_loss_fn = staticmethod(make_loss_fn)

    def __init__(
        self,
        cfg: config_lib.Config,
        workdir: str,
        rt: stage_setup.Runtime,
        tok,
        template,
        start_params: Callable[[], Any],
    ):
        self._cfg, self._rt = cfg, rt
        self._rewarder = rewarders.make(cfg, workdir, rt, tok, template)
        self._reference = None
        if cfg.rl.kl_coef > 0:
            self._reference = frozen.FrozenScorer.reference(
                cfg.model,
                start_params(),
                mesh=rt.mesh,
                rules=rt.rules,
                implementation=cfg.train.logprob_impl or None,
            )
        self._batch_shards = rules_lib.batch_shards(rt.mesh, rt.rules)
        if cfg.rl.dynamic_filter == "refill" and jax.process_count() > 1:
            # Each process would need its own number of rounds of a collective sampler.
            raise config_lib.ConfigError(
                "config.rl.dynamic_filter='refill' runs on one process only; use 'batch'"
            )
        self._stream: streaming.StreamingScorer | None = None

    def stream(self, examples) -> Callable[[np.ndarray, list[str]], None] | None:
        """The sampler's `on_finish` for this step's rollouts: verifier rewards are
        scored as rows finish, while the rest decode (continuous engine only)."""
        self._stream = None
        rl = self._cfg.rl
        if rl.engine != "continuous" or not isinstance(self._rewarder, rewarders.VerifierRewarder):
            return None

        def score_rows(rows, completions):
            return self._rewarder.score([examples[i // rl.group_size] for i in rows], completions)

        self._stream = streaming.StreamingScorer(score_rows, len(examples) * rl.group_size)
        return self._stream.submit

    def prepare(self, step, examples, rollouts, phase, draw) -> driver.Prepared:
        cfg, rl = self._cfg, self._cfg.rl
        first = self._round(examples, rollouts, phase)
        if rl.dynamic_filter == "refill":  # sample more prompts for informative groups
            t0 = time.perf_counter()
            rounds = refill.collect(
                first, lambda i: self._round(*draw(i), phase), rl.refill_max_batches
            )
            prepared = refill.merge(rounds, rl.group_size)
            extra = {"refill_s": time.perf_counter() - t0}
        else:
            rounds, prepared, extra = [first], first.prepared, first.metrics
        in_loss = prepared.batch["loss_mask"].any(-1)
        parts.check_finite_inputs(
            cfg,
            self._rt,
            step,
            rewards=prepared.rewards,
            advantages=prepared.batch["advantages"][in_loss],
        )
        train_batch = prepared.batch
        if jax.process_count() == 1:
            rows = cfg.train.num_microbatches * self._batch_shards * rl.updates_per_batch
            train_batch = rl_batch.compact(train_batch, rows, length_multiple=32)
        metrics = dict(
            prepared.metrics,
            **extra,
            train_rows=len(train_batch["loss_mask"]),
            train_len=train_batch["loss_mask"].shape[1],
        )
        # Every sampled group's pass rate goes back to the stream, trained on or not.
        pass_rates = [
            rate
            for r in rounds
            for rate in r.prepared.rewards.reshape(-1, rl.group_size).mean(-1).tolist()
        ]
        sampled = [ex for r in rounds for ex in r.examples]
        return driver.Prepared(train_batch, metrics, pass_rates, sampled)

    def _round(self, examples, rollouts, phase) -> refill.Round:
        """Scores one round of rollouts and prepares its (uncompacted) rows."""
        rl = self._cfg.rl
        t0 = time.perf_counter()
        if self._stream is not None:  # scored while decoding; wait for the rest
            scores, verify = self._stream.finish(rollout_end=t0)
            self._stream = None
        else:
            scores = self._rewarder(examples, rollouts)
            verify = {"verify_s": time.perf_counter() - t0}
        ref_logprobs = None
        if self._reference is not None:
            ref_logprobs = self._reference.logprobs(rollouts.batch, phase.temperature)
            if rl.kl_in_reward:
                scores, _ = kl_lib.kl_in_reward(
                    scores,
                    rollouts.batch.sampler_logprobs,
                    ref_logprobs,
                    rollouts.batch.loss_mask,
                    coef=rl.kl_coef,
                    kind=rl.kl_kind,
                )
                scores = np.asarray(scores)
        prepared = rl_batch.prepare(
            rl, rollouts.batch, scores, rollouts.truncated, rl.group_size, ref_logprobs
        )
        return refill.Round(list(examples), prepared, verify)

    def progress(self, host: dict) -> dict:
        return {"reward": host["reward_mean"]}

    def close(self) -> None:
        self._rewarder.close()


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) an RL / RLHF stage with the on-policy driver."""
    return driver.run(cfg, workdir, GRPO)
