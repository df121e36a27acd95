"""The one on-policy loop: RL (GRPO, RLHF) and MOPD plug in as algorithms.

A step: draw prompts (`parts.make_stream`) → sample `rl.group_size`
responses each with the current params (`parts.sample_student`) →
`algorithm.prepare` turns the sampled batch into a train batch and its
metrics (GRPO: rewards, advantages, filtering; MOPD: teacher log-probs) →
exactly one optimizer step on `algorithm.make_loss_fn` → log, checkpoint,
own-domain eval (`parts.after_step`), preemption, forgetting guard. What
an algorithm is, is `Algorithm`; everything else here is the same for every
on-policy stage: set-up, the step-0 eval, progress, finish.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax

from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.rollout import groups
from nemocascade.sharding import rules as rules_lib
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer import preemption, stage_eval, stage_setup
from nemocascade.trainer.onpolicy import guard as guard_lib, parts


@dataclasses.dataclass
class Prepared:
    """What an algorithm makes of one sampled batch.

    Attributes:
      batch: host arrays of the train step ([B, T] rows; `loss_mask` among them).
      metrics: the algorithm's step metrics (its own timing included).
      pass_rates: per prompt, fed back to the prompt stream (epoch-level
        dynamic filtering); None when the algorithm has no reward.
      examples: the prompts of `pass_rates` when the algorithm drew more than
        the step's (None: the step's).
    """

    batch: dict
    metrics: dict
    pass_rates: list[float] | None = None
    examples: list[tasks_base.Example] | None = None


class Algorithm(Protocol):
    """How a sampled batch becomes a loss. `make_loss_fn(cfg, temperature)` is the loss."""

    make_loss_fn: Callable[[config_lib.Config, float], Callable]

    def prepare(
        self,
        step: int,
        examples: Sequence[tasks_base.Example],
        rollouts: groups.RolloutBatch,
        phase: parts.Phase,
        draw: Callable[[int], tuple[list[tasks_base.Example], groups.RolloutBatch]],
    ) -> Prepared:
        """`draw(round)` samples the stream's next prompts, for an algorithm that
        wants more than the step's (GRPO's refill, `onpolicy/refill.py`)."""

    def progress(self, host: dict) -> dict:
        """Fields of the progress bar besides the response length."""

    def close(self) -> None: ...


# (cfg, workdir, runtime, tokenizer, template, start_params) -> Algorithm, where
# `start_params()` gives the params the stage started from (`stage_setup.start_params`).
AlgorithmFactory = Callable[..., Algorithm]


def _draw(cfg, rt, tok, template, params, stream, algorithm, phase, rng, round_: int):
    """The stream's next prompts and their rollouts; round > 0 (a refill) has its own rng."""
    examples = stream.next_batch()
    # An algorithm with `stream` scores rows while the rest decode.
    on_finish = algorithm.stream(examples) if hasattr(algorithm, "stream") else None
    rng = jax.random.fold_in(rng, round_) if round_ else rng
    rollouts = parts.sample_student(cfg, rt, tok, template, params, examples, phase, rng, on_finish)
    return examples, rollouts


def run(cfg: config_lib.Config, workdir: str, make_algorithm: AlgorithmFactory) -> dict[str, Any]:
    """Trains (or resumes) an on-policy stage; returns its final own-domain eval."""
    stage_dir = stage_setup.stage_dir(workdir, cfg.stage)
    if checkpointing.is_done(stage_dir):
        logging.info("[%s] already finished (%s); skipping", cfg.stage, stage_dir)
        return {}
    tok, template, _ = stage_setup.text_for(cfg, stage_dir)
    rt = stage_setup.setup(cfg, workdir)
    state, data_state, where = stage_setup.init_state(rt)
    stream = parts.make_stream(cfg, data_state, tok, template)
    start_params = functools.partial(stage_setup.start_params, rt, state, where)
    algorithm = make_algorithm(cfg, workdir, rt, tok, template, start_params)
    step_fn = parts.train_steps(cfg, rt, algorithm.make_loss_fn)
    own_eval = stage_eval.own_domain_eval(cfg, tok, template, rt)
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
            phase = parts.phase_at(cfg.rl, step)
            stream.source.set_limits(phase.limits)
            rng = jax.random.fold_in(key, step)
            draw = functools.partial(
                _draw, cfg, rt, tok, template, state.params, stream, algorithm, phase, rng
            )
            t0 = time.perf_counter()
            examples, rollouts = draw(0)
            t1 = time.perf_counter()
            prepared = algorithm.prepare(step, examples, rollouts, phase, draw)
            if prepared.pass_rates is not None:
                stream.record(prepared.examples or examples, prepared.pass_rates)
            t2 = time.perf_counter()
            batch = rules_lib.put_batch(prepared.batch, rt.mesh, rt.rules)
            state, m = step_fn(phase.temperature)(state, batch, key)
            services.after(step, m)
            host = metrics_lib.to_python(m)
            t3 = time.perf_counter()
            parts.check_finite(cfg, rt, host, step)
            lengths = rollouts.lengths
            host.update(prepared.metrics)
            host.update(
                response_len_mean=float(lengths.mean()),
                response_len_max=float(lengths.max()),
                max_new_tokens=phase.max_new_tokens,
                temperature=phase.temperature,
                rollout_s=t1 - t0,
                train_s=t3 - t2,
                rollout_tokens_per_s=float(lengths.sum()) / max(t1 - t0, 1e-9),
                prompts_skipped=stream.skipped,
                **stream.source.metrics(),
            )
            bar.update(1, **algorithm.progress(host), len=host["response_len_mean"])
            parts.after_step(cfg, rt, step, state, stream, host, own_eval, bar)
            services.check(step, cfg.train.steps, state, stream.get_state, rt.manager)
            if guard is not None and parts.guard_stops(cfg, guard, step, state, stream):
                state = guard.restore_last_passing(step)
                break
    bar.close()
    final = parts.finish(cfg, rt, tok, template, state, stream.get_state(), own_eval)
    if guard is not None:
        guard.close()
    algorithm.close()
    rt.close()
    return final
