"""The continuous engine's device side: the state of its decode slots and the
jitted functions over it (`continuous.py` is the host loop that drives them).

`Slots` holds S rows of the static sampler's layout (prompt left-padded to the
bucket P at cache slots [0, P), completion token j at slot P + j) plus each
row's step, request index, budgets and outputs so far. `admit` prefills
unique prompts and installs them in free slots, `chunk` runs up to
`chunk_steps` decode steps of every active slot, `harvest` reads finished
slots out and frees them, `peek` reads live slots' tokens without freeing
them. Each is jitted once per shape bucket, and the state is donated.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from nemocascade.model import kv_cache, presets, transformer
from nemocascade.rollout import decode_step, decoding, sampling_methods
from nemocascade.sharding import rules as rules_lib


@dataclasses.dataclass(frozen=True)
class Static:
    model_cfg: presets.ModelConfig
    method: sampling_methods.Method
    max_new_tokens: int
    prompt_len: int
    pad_id: int
    chunk_steps: int
    rules: rules_lib.Rules | None


@flax.struct.dataclass
class Slots:
    """Device state of the S decode slots (M = max_new_tokens)."""

    cache: Any
    hidden_sd: jax.Array  # final hidden state at each slot's last fed token
    step_s: jax.Array  # completion index of the token chosen next
    request_s: jax.Array  # request index (the random key depends on it)
    pad_s: jax.Array  # left padding of the slot's prompt
    budget_s: jax.Array
    answer_s: jax.Array
    live_s: jax.Array  # holds a request whose outputs are not harvested yet
    flags: decode_step.RowFlags
    tokens_sm: jax.Array
    logprobs_sm: jax.Array
    forced_sm: jax.Array
    mask_sm: jax.Array


def _rules_scope(static: Static):
    if static.rules is None:
        return contextlib.nullcontext()
    return nn.logical_axis_rules(static.rules)


def admit(
    params, slots: Slots, prompt_up, pad_u, src_f, dst_f, request_f, budget_f, answer_f, *, static
):
    """Prefills the U unique prompts and installs them in slots `dst_f` (S = none).

    Slot `dst_f[i]` gets the KV rows and last hidden state of prompt `src_f[i]`.
    """
    cfg, m = static.model_cfg, static.max_new_tokens
    u, p = prompt_up.shape
    with _rules_scope(static):
        slots_p = jnp.arange(p, dtype=jnp.int32)
        seg_up = (slots_p[None] >= pad_u[:, None]).astype(jnp.int32)
        pos_up = jnp.maximum(slots_p[None] - pad_u[:, None], 0)
        hidden_upd, fresh = transformer.Transformer(cfg).apply(
            {"params": params},
            prompt_up,
            pos_up,
            seg_up,
            cache=transformer.init_cache(cfg, u, p),
            cache_index=0,
        )
    cache = kv_cache.copy_rows(slots.cache, dst_f, fresh, src_f, p)

    def put(buf, val):
        val = jnp.broadcast_to(jnp.asarray(val, buf.dtype), dst_f.shape + buf.shape[1:])
        return buf.at[dst_f].set(val, mode="drop")

    start = decode_step.RowFlags.start(jnp.zeros(dst_f.shape, bool), budget_f)
    return slots.replace(
        cache=cache,
        hidden_sd=put(slots.hidden_sd, hidden_upd[src_f, -1]),
        step_s=put(slots.step_s, 0),
        request_s=put(slots.request_s, request_f),
        pad_s=put(slots.pad_s, pad_u[src_f]),
        budget_s=put(slots.budget_s, budget_f),
        answer_s=put(slots.answer_s, answer_f),
        live_s=put(slots.live_s, True),
        flags=jax.tree.map(put, slots.flags, start),
        tokens_sm=put(slots.tokens_sm, jnp.full((m,), static.pad_id)),
        logprobs_sm=put(slots.logprobs_sm, 0.0),
        forced_sm=put(slots.forced_sm, 0),
        mask_sm=put(slots.mask_sm, 0),
    )


def chunk(params, slots: Slots, ids, rng, *, static):
    """Up to `chunk_steps` decode steps of every active slot (stops early when none is)."""
    cfg, m, p = static.model_cfg, static.max_new_tokens, static.prompt_len
    model = transformer.Transformer(cfg)
    w_dv = transformer.unembedding(params, cfg)
    rows_s = jnp.arange(slots.step_s.shape[0])

    def active(sl: Slots):
        return sl.live_s & ~sl.flags.done_b

    def cond(carry):
        i, sl = carry
        return (i < static.chunk_steps) & jnp.any(active(sl))

    def body(carry):
        i, sl = carry
        active_s = active(sl)
        logits_sv = jnp.einsum(
            "sd,dv->sv",
            sl.hidden_sd,
            w_dv.astype(sl.hidden_sd.dtype),
            preferred_element_type=jnp.float32,
        )
        tok_s, lp_s, forced_s, flags = decode_step.advance(
            logits_sv,
            sampling_methods.row_keys(rng, sl.request_s, sl.step_s),
            sl.step_s,
            active_s,
            sl.flags,
            sl.budget_s,
            sl.answer_s,
            ids,
            method=static.method,
            pad_id=static.pad_id,
        )
        col_s = jnp.where(active_s, sl.step_s, m)  # column m is dropped

        def put(buf, val):
            return buf.at[rows_s, col_s].set(val.astype(buf.dtype), mode="drop")

        # Inactive slots write a padding entry at slot 0 of their own row.
        slot_s = jnp.where(active_s, p + sl.step_s, 0)
        with _rules_scope(static):
            hidden_s1d, cache = model.apply(
                {"params": params},
                tok_s[:, None],
                jnp.where(active_s, slot_s - sl.pad_s, 0)[:, None],
                active_s[:, None].astype(jnp.int32),
                cache=sl.cache,
                cache_index=slot_s,
            )
        step_s = sl.step_s + active_s
        flags = flags.replace(done_b=flags.done_b | (active_s & (step_s >= m)))
        return i + 1, sl.replace(
            cache=cache,
            hidden_sd=hidden_s1d[:, 0],
            step_s=step_s,
            flags=flags,
            tokens_sm=put(sl.tokens_sm, tok_s),
            logprobs_sm=put(sl.logprobs_sm, lp_s),
            forced_sm=put(sl.forced_sm, forced_s),
            mask_sm=put(sl.mask_sm, active_s),
        )

    _, slots = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), slots))
    return slots, slots.live_s & slots.flags.done_b


def harvest(slots: Slots, idx_h):
    """Outputs of slots `idx_h` (S = none) and the state with those slots released."""
    out = {
        "completion_tokens": slots.tokens_sm,
        "logprobs": slots.logprobs_sm,
        "forced_mask": slots.forced_sm,
        "completion_mask": slots.mask_sm,
        "stopped": slots.flags.stopped_b,
    }
    out = jax.tree.map(lambda x: x.at[idx_h].get(mode="fill", fill_value=0), out)
    return out, slots.replace(live_s=slots.live_s.at[idx_h].set(False, mode="drop"))


def peek(slots: Slots, idx_h):
    """Tokens so far and their count of slots `idx_h` (S = none), without releasing them."""
    tokens = slots.tokens_sm.at[idx_h].get(mode="fill", fill_value=0)
    return tokens, slots.step_s.at[idx_h].get(mode="fill", fill_value=0)


admit_jit = jax.jit(admit, static_argnames=("static",), donate_argnames=("slots",))
chunk_jit = jax.jit(chunk, static_argnames=("static",), donate_argnames=("slots",))
harvest_jit = jax.jit(harvest, donate_argnames=("slots",))
peek_jit = jax.jit(peek)


def empty(cfg: presets.ModelConfig, s: int, p: int, m: int, pad_id: int, mesh, rules):
    cache = decoding._allocate_cache(cfg, s, p + m, mesh, rules)

    def zeros_s():  # one buffer per field: the state is donated as a whole
        return jnp.zeros((s,), jnp.int32)

    return Slots(
        cache=cache,
        hidden_sd=jnp.zeros((s, cfg.d_model), transformer.layers.dtype_of(cfg.dtype)),
        step_s=zeros_s(),
        request_s=zeros_s(),
        pad_s=zeros_s(),
        budget_s=zeros_s(),
        answer_s=zeros_s(),
        live_s=jnp.zeros((s,), bool),
        flags=decode_step.RowFlags.start(jnp.ones((s,), bool), zeros_s()),
        tokens_sm=jnp.full((s, m), pad_id, jnp.int32),
        logprobs_sm=jnp.zeros((s, m), jnp.float32),
        forced_sm=jnp.zeros((s, m), jnp.int32),
        mask_sm=jnp.zeros((s, m), jnp.int32),
    )
