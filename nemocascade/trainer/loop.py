"""The host training loop of the stages that train on a data loader: SFT and RM.

(The on-policy stages — RL, RLHF, MOPD — run `trainer/onpolicy/driver.py`.)

Step i+1 is dispatched before step i's metrics are pulled, so the host never
stalls the device; the pulled loss and gradient norm are checked for NaN/Inf
every step (a one-step lag), which stops the stage with a clear message while
the last good checkpoint stays on disk.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax

from nemocascade import checkpointing, metrics as metrics_lib
from nemocascade.trainer import preemption


class NonFiniteError(FloatingPointError):
    """Loss or gradient norm became NaN/Inf."""


@dataclasses.dataclass
class LoopSpec:
    stage: str
    total_steps: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    flops_per_token: float
    tokens_per_step: int  # tokens the step computes on (padding included)
    progress: bool = True
    profile_steps: tuple[int, ...] = ()  # (start, end): jax.profiler trace of those steps
    profile_dir: str = ""


def spec_for(cfg, stage_dir: str, total_steps: int, tokens_per_step: int) -> LoopSpec:
    """The loop settings of a stage's `train` section (`cfg` is a `config.Config`)."""
    t = cfg.train
    return LoopSpec(
        stage=cfg.stage,
        total_steps=total_steps,
        log_every=t.log_every,
        eval_every=t.eval_every,
        checkpoint_every=t.checkpoint_every,
        flops_per_token=cfg.model.flops_per_token(t.seq_len),
        tokens_per_step=tokens_per_step,
        progress=t.progress,
        profile_steps=t.profile_steps,
        profile_dir=f"{stage_dir}/tb",
    )


def run_stage(
    cfg, rt, state, step_fn, batches, data_state, tokens_per_step, evaluate=None, total_steps=None
) -> Any:
    """A loader stage's training: the step-0 eval of a fresh start, then `run`.

    `rt` is the stage's runtime (`stage_setup.Runtime`: manager, writer,
    stage_dir); `step_fn(state, batch, rng)` gets the key of `train.seed`;
    `evaluate(params) -> metrics` runs at step 0 and every `train.eval_every`;
    `total_steps` defaults to `train.steps`.
    """
    spec = spec_for(cfg, rt.stage_dir, total_steps or cfg.train.steps, tokens_per_step)
    if evaluate is not None and int(jax.device_get(state.step)) == 0:
        rt.writer.write(0, evaluate(state.params))
    rng = jax.random.key(cfg.train.seed)
    return run(
        spec,
        state=state,
        step_fn=lambda s, b: step_fn(s, b, rng),
        batches=batches,
        data_state=data_state,
        manager=rt.manager,
        writer=rt.writer,
        eval_fn=(lambda s, step: evaluate(s.params)) if evaluate is not None else None,
    )


def run(
    spec: LoopSpec,
    *,
    state: Any,
    step_fn: Callable[[Any, Any], tuple[Any, dict]],
    batches: Iterator[Any],
    data_state: Callable[[], dict],
    manager: checkpointing.Manager,
    writer: metrics_lib.Writer,
    eval_fn: Callable[[Any, int], dict] | None = None,
) -> Any:
    """Runs `step_fn(state, batch) -> (state, metrics)` to `spec.total_steps`."""
    start = int(jax.device_get(state.step))
    bar = metrics_lib.Progress(spec.total_steps, start, spec.stage, spec.progress)
    meter = metrics_lib.Throughput(spec.flops_per_token)
    pending: tuple[int, dict] | None = None
    rate: dict[str, str] = {}
    last_saved = start

    def finish(step: int, m: dict):
        host = metrics_lib.to_python(m)
        for key in ("loss", "grad_norm"):
            if key in host and not math.isfinite(host[key]):
                raise NonFiniteError(
                    f"[{spec.stage}] {key} is {host[key]} at step {step}; stopping. "
                    f"Last good checkpoint: step {manager.latest_step()} in {manager.directory}"
                )
        meter.add(spec.tokens_per_step)
        if step % spec.log_every == 0 or step == spec.total_steps:
            host.update(meter.measure())
            writer.write(step, host)
            rate["tok/s"] = f"{host['tokens_per_s']:.0f}"
        bar.update(1, loss=host.get("loss", float("nan")), **rate)

    watcher = preemption.Watcher()
    profiler = preemption.Profiler(spec.profile_steps, spec.profile_dir)
    try:
        for step in range(start + 1, spec.total_steps + 1):
            profiler.before(step)
            batch = next(batches)
            state, m = step_fn(state, batch)
            profiler.after(step, m)
            if pending is not None:
                finish(*pending)
            pending = (step, m)
            if step % spec.checkpoint_every == 0 and step != spec.total_steps:
                manager.save(step, state, data_state())
                last_saved = step
            if eval_fn is not None and step % spec.eval_every == 0 and step != spec.total_steps:
                finish(*pending)
                pending = None
                ev = eval_fn(state, step)
                writer.write(step, ev)
                bar.write(f"[{spec.stage}] step {step}: " + _summary(ev))
            if step != spec.total_steps and watcher.requested(step, manager):
                if pending is not None:
                    finish(*pending)
                    pending = None
                preemption.stop_here(spec.stage, step, state, data_state, manager)
    finally:
        watcher.close()
        profiler.close()
    if pending is not None:
        finish(*pending)
    if spec.total_steps > last_saved:
        manager.save(spec.total_steps, state, data_state(), force=True)
    manager.wait()
    bar.close()
    logging.info("[%s] finished at step %d", spec.stage, spec.total_steps)
    return state


def _summary(m: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in m.items() if isinstance(v, float))
