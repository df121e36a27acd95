"""Pieces every on-policy stage shares: prompt stream, student rollouts, NaN guard, finish.

The pieces of the on-policy driver (`onpolicy/driver.py`), which runs RL (GRPO)
and on-policy distillation (MOPD) alike: drawing prompts, sampling the student
on the training mesh, the periodic log/checkpoint/eval, stopping on a
non-finite reward, advantage or step (naming the last good checkpoint) and the
end-of-stage hand-off (final checkpoint, own-domain eval, eval matrix,
exported params + DONE).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from nemocascade import checkpointing, config as config_lib, stage_registry
from nemocascade.data import chat_template, pipelines, tokenizer as tokenizer_lib
from nemocascade.rollout import groups, sampling_methods
from nemocascade.sharding import rules as rules_lib
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer import loop, stage_eval, stage_setup, step as step_lib
from nemocascade.trainer.onpolicy import prompt_curriculum, prompt_stream


@dataclasses.dataclass(frozen=True)
class Phase:
    """The settings in force at a step (length curriculum; its prompt side in `limits`)."""

    max_new_tokens: int
    temperature: float
    limits: prompt_curriculum.Limits = prompt_curriculum.Limits()


def phase_at(rl: config_lib.RLConfig, step: int) -> Phase:
    """Curriculum sub-stage of 1-based `step` (the last one extends to the end)."""
    if not rl.curriculum:
        return Phase(rl.max_new_tokens, rl.temperature)
    start, c = 0, rl.curriculum[-1]
    for stage in rl.curriculum:
        if step <= start + stage.steps:
            c = stage
            break
        start += stage.steps
    limits = prompt_curriculum.Limits(c.max_prompt_tokens, c.levels)
    return Phase(c.max_new_tokens, c.temperature, limits)


def modes_for(rl: config_lib.RLConfig, n: int) -> list[str]:
    if rl.mode == "half_half":
        return ["thinking" if i % 2 == 0 else "instruct" for i in range(n)]
    return [rl.mode] * n


def prompt_filter(
    cfg: config_lib.Config, length: Callable[[tasks_base.Example], int]
) -> Callable[[tasks_base.Example], bool]:
    """keep(example): its prompt and the longest response fit the context (`data.long_prompts`).

    A prompt that does not fit is dropped (counted and logged when the
    records are indexed) or, with `data.long_prompts="error"`, stops the run
    naming its file and line.
    """
    r = cfg.rl
    longest = max([r.max_new_tokens] + [c.max_new_tokens for c in r.curriculum])
    room = cfg.model.max_seq_len - longest

    def keep(example: tasks_base.Example) -> bool:
        n = length(example)
        if n <= room:
            return True
        if cfg.data.long_prompts == "error":
            raise config_lib.ConfigError(
                f"{example.uid}: the prompt has {n} tokens; with config.rl.max_new_tokens="
                f"{longest} at most {room} fit config.model.max_seq_len={cfg.model.max_seq_len} "
                "(config.data.long_prompts='drop' drops such prompts)"
            )
        return False

    return keep


def prompt_length(cfg: config_lib.Config, tok, template) -> Callable[[tasks_base.Example], int]:
    """example → its rendered prompt's tokens, the longest over the stage's modes."""
    modes = cfg.rl.train_modes

    def length(example: tasks_base.Example) -> int:
        rendered = (chat_template.render_example_prompt(tok, example, m, template) for m in modes)
        return max(len(ids) for ids in rendered)

    return length


def _by_uid(length: Callable[[tasks_base.Example], int]) -> Callable[[tasks_base.Example], int]:
    """`length` computed once per prompt uid (the records' indexing and the prompt
    source ask for the same prompts)."""
    memo: dict[str, int] = {}

    def cached(example: tasks_base.Example) -> int:
        if example.uid not in memo:
            memo[example.uid] = length(example)
        return memo[example.uid]

    return cached


def make_stream(
    cfg: config_lib.Config, data_state: dict, tok=None, template=None
) -> prompt_stream.PromptStream:
    """`rl.prompts_per_step` RL prompts of `rl.domains` (in `rl.domain_weights`
    proportions, or of `data.files`) per step, split over processes, under the
    curriculum's prompt limits (`stream.source.set_limits`) and, with
    `rl.length_group_window`, grouped by length (`prompt_curriculum`)."""
    r = cfg.rl
    length = _by_uid(prompt_length(cfg, tok, template)) if tok is not None else None
    keep = prompt_filter(cfg, length) if cfg.data.files and length is not None else None
    loader = pipelines.rl_prompts(
        batch_size=1,
        seed=cfg.train.seed,
        domains=r.domains,
        num_examples=r.num_prompts,
        domain_weights=r.domain_weights,
        files=cfg.data.files,
        file_weights=cfg.data.file_weights,
        keep=keep,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )
    needs_length = r.length_group_window or any(c.max_prompt_tokens for c in r.curriculum)
    if needs_length and length is None:
        raise ValueError("config.rl.length_group_window / max_prompt_tokens need the tokenizer")
    source = prompt_curriculum.PromptSource(
        loader,
        length=length if needs_length else None,
        window=r.length_group_window // jax.process_count(),
        group=r.prompts_per_step // jax.process_count(),
        seed=cfg.train.seed,
    )
    stream = prompt_stream.PromptStream(
        source,
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
    rt: stage_setup.Runtime,
    tok: tokenizer_lib.Tokenizer,
    template: chat_template.Template,
    params: Any,
    examples: list[tasks_base.Example],
    phase: Phase,
    rng: jax.Array,
    on_finish=None,
) -> groups.RolloutBatch:
    """`rl.group_size` responses per prompt from the current params, modes per `rl.mode`.

    On `rl.engine` (static or continuous; the same rollouts for the same rng);
    `on_finish` hears of finished rows while the rest decode (continuous only).
    """
    r = cfg.rl
    return groups.sample_groups(
        params,
        cfg.model,
        tok,
        examples,
        group_size=r.group_size,
        modes=modes_for(r, len(examples)),
        method=sampling_methods.Sample(temperature=phase.temperature, top_k=r.top_k, top_p=r.top_p),
        max_new_tokens=phase.max_new_tokens,
        rng=rng,
        template=template,
        thinking_budget=r.thinking_budget or None,
        mesh=rt.mesh,
        rules=rules_lib.get_rules("decode"),
        engine=r.engine,
        num_slots=r.engine_slots,
        on_finish=on_finish,
    )


def train_steps(cfg: config_lib.Config, rt: stage_setup.Runtime, make_loss_fn) -> Callable:
    """temperature → the jitted train step of `make_loss_fn(cfg, temperature)`, built once each.

    The sampling temperature enters the loss (log-probs at the temperature the
    tokens were drawn with), and a length curriculum may change it mid-stage.
    """
    cache: dict[float, Callable] = {}
    # PPO epochs over one rollout batch are a GRPO option; MOPD updates once.
    updates = cfg.rl.updates_per_batch if stage_registry.STAGES[cfg.stage].kind == "rl" else 1

    def get(temperature: float) -> Callable:
        if temperature not in cache:
            cache[temperature] = step_lib.make_train_step(
                make_loss_fn(cfg, temperature),
                rt.tx,
                num_microbatches=cfg.train.num_microbatches,
                mesh=rt.mesh,
                rules=rt.rules,
                state_shardings=rt.state_shardings,
                updates_per_batch=updates,
            )
        return cache[temperature]

    return get


def after_step(
    cfg: config_lib.Config,
    rt: stage_setup.Runtime,
    step: int,
    state: Any,
    stream: prompt_stream.PromptStream,
    host: dict,
    own_eval,
    bar,
):
    """The periodic part of a step: log metrics, checkpoint, own-domain eval."""
    if step % cfg.train.log_every == 0 or step == cfg.train.steps:
        rt.writer.write(step, host)
    if step % cfg.train.checkpoint_every == 0 and step != cfg.train.steps:
        rt.manager.save(step, state, stream.get_state())
    if step % cfg.train.eval_every == 0 and step != cfg.train.steps:
        ev = own_eval(state.params)
        rt.writer.write(step, ev)
        bar.write(f"[{cfg.stage}] step {step}: " + ", ".join(f"{k}={v:.3f}" for k, v in ev.items()))


def guard_stops(cfg: config_lib.Config, guard, step: int, state: Any, stream) -> bool:
    """At an eval step (and the last), the forgetting guard's verdict: True = stop here."""
    if step % cfg.train.eval_every and step != cfg.train.steps:
        return False
    return guard.check(step, state, stream.get_state())


def _last_good(rt: stage_setup.Runtime) -> str:
    latest = rt.manager.latest_step()
    where = rt.manager.directory
    return f"step {latest} in {where}" if latest is not None else f"none yet in {where}"


def check_finite(cfg: config_lib.Config, rt: stage_setup.Runtime, host: dict, step: int):
    """Stops the stage on a NaN/Inf loss or gradient norm, naming the last good checkpoint."""
    for name in ("loss", "grad_norm"):
        if not math.isfinite(host[name]):
            raise loop.NonFiniteError(
                f"[{cfg.stage}] {name} is {host[name]} at step {step}; stopping. "
                f"Last good checkpoint: {_last_good(rt)}"
            )


def check_finite_inputs(cfg: config_lib.Config, rt: stage_setup.Runtime, step: int, **arrays):
    """Stops the stage *before* the update when a reward, advantage or target is NaN/Inf.

    A non-finite advantage on a masked-out row never reaches the loss, but on a
    valid one it turns the update (and so every later checkpoint) into NaN; the
    loss check would only see it after the params were overwritten. Callers
    pass only the entries that enter the loss.
    """
    for name, values in arrays.items():
        flat = np.asarray(values, np.float64).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(flat))
        if bad.size:
            raise loop.NonFiniteError(
                f"[{cfg.stage}] {name} has {bad.size} non-finite value(s) at step {step} "
                f"(first: entry {bad[0]} = {flat[bad[0]]}); stopping before the update. "
                f"Last good checkpoint: {_last_good(rt)}"
            )


def finish(
    cfg: config_lib.Config,
    rt: stage_setup.Runtime,
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
    stage_eval.write_matrix(cfg, tok, template, rt, state.params)
    checkpointing.export_params(rt.stage_dir, state.params, {"stage": cfg.stage, **final})
    return final
