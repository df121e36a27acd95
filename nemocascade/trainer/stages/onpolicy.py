"""Pieces every on-policy stage shares: prompt stream, student rollouts, NaN guard, finish.

The RL stage (GRPO) and on-policy distillation (MOPD) differ only in how a
sampled batch becomes a loss; drawing prompts, sampling the student on the
training mesh, stopping on a non-finite step and the end-of-stage hand-off
(final checkpoint, own-domain eval, eval matrix, exported params + DONE) are
the same, and live here so both stay in step with the cascade.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import jax

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import chat_template, pipelines, tokenizer as tokenizer_lib
from nemocascade.rollout import engine, sampling
from nemocascade.sharding import rules as rules_lib
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer import loop, prompt_stream
from nemocascade.trainer.stages import common, evaluation, rl


def make_stream(cfg: config_lib.Config, data_state: dict) -> prompt_stream.PromptStream:
    """`rl.prompts_per_step` RL-split prompts of `rl.domains` per step (split over processes)."""
    r = cfg.rl
    loader = pipelines.rl_prompts(
        batch_size=1,
        seed=cfg.train.seed,
        domains=r.domains,
        num_examples=r.num_prompts,
        path=cfg.data.jsonl or None,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )
    stream = prompt_stream.PromptStream(
        loader,
        r.prompts_per_step // jax.process_count(),
        epoch_filter=r.dynamic_filter == "epoch",
        resample_easy=r.resample_easy,
        resample_hard=r.resample_hard,
        seed=cfg.train.seed,
    )
    if data_state:
        stream.set_state(data_state)
    return stream


def sample_student(
    cfg: config_lib.Config,
    rt: common.Runtime,
    tok: tokenizer_lib.Tokenizer,
    template: chat_template.Template,
    params: Any,
    examples: list[tasks_base.Example],
    phase: rl.Phase,
    rng: jax.Array,
) -> engine.RolloutBatch:
    """`rl.group_size` responses per prompt from the current params, modes per `rl.mode`."""
    r = cfg.rl
    return engine.sample_groups(
        params,
        cfg.model,
        tok,
        examples,
        group_size=r.group_size,
        modes=rl.modes_for(r, len(examples)),
        method=sampling.Sample(temperature=phase.temperature, top_k=r.top_k, top_p=r.top_p),
        max_new_tokens=phase.max_new_tokens,
        rng=rng,
        template=template,
        thinking_budget=r.thinking_budget or None,
        mesh=rt.mesh,
        rules=rules_lib.get_rules("decode"),
    )


def check_finite(cfg: config_lib.Config, rt: common.Runtime, host: dict, step: int):
    """Stops the stage on a NaN/Inf loss or gradient norm, naming the last good checkpoint."""
    for name in ("loss", "grad_norm"):
        if not math.isfinite(host[name]):
            raise loop.NonFiniteError(
                f"[{cfg.stage}] {name} is {host[name]} at step {step}; stopping. Last good "
                f"checkpoint: step {rt.manager.latest_step()} in {rt.manager.directory}"
            )


def finish(
    cfg: config_lib.Config,
    rt: common.Runtime,
    tok: tokenizer_lib.Tokenizer,
    template: chat_template.Template,
    state: Any,
    data_state: dict,
    own_eval,
) -> dict[str, float]:
    """Final checkpoint, own-domain eval, eval matrix, exported params and DONE."""
    rt.manager.save(cfg.train.steps, state, data_state, force=True)
    rt.manager.wait()
    final = own_eval(state.params)
    rt.writer.write(cfg.train.steps, final)
    logging.info("[%s] final: %s", cfg.stage, final)
    evaluation.write_matrix(cfg, tok, template, rt, state.params)
    checkpointing.export_params(rt.stage_dir, state.params, {"stage": cfg.stage, **final})
    return final
