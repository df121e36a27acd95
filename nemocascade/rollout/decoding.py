"""The sampler: one prefill, then a `jax.lax.while_loop` decode over a donated KV cache.

Layout. Prompts are left-padded to a bucket length P (a power of two, at least
16): pads carry segment 0, real tokens segment 1, and RoPE positions count
from the first real token (`slot - pad_len`). Completion token j then sits at
cache slot P + j for every row, so one scalar `cache_index` drives the whole
batch. The batch is padded to a bucket too (a power of two, rounded up to the
data-parallel size); padded rows start finished. The cache holds P +
max_new_tokens slots and is allocated once per call, in its sharded layout,
and donated to the jitted decode, which updates it in place.

Compiles. The jitted function is keyed by the (P, batch bucket) shapes and a
small hashable static config (model shape, method, max_new_tokens, pad id,
sharding rules). Stop and think-close ids travel as fixed-capacity traced
arrays and thinking/answer budgets as per-row arrays, so changing them does
not recompile, and instruct and thinking rows share one call.

Deep-thinking budget. Rows with a budget start inside an open think block
(the c1 model opens it first thing, the c2 prompt already has). A row that
has produced `thinking_budget` completion tokens without emitting
`think_end_id` is forced to emit `think_close_ids`, one per step (flagged in
`forced_mask`, so RL can drop them from the loss), and may then answer for at
most `answer_budget` more tokens. A row finishes on a stop token, on an
exhausted answer budget, or at `max_new_tokens`; `truncated` means it never
produced a stop token.

Log-probs are those of `sampling_methods.choose` (the distribution actually sampled
from); forced tokens get the untruncated log-prob at the sampling temperature.
The per-step rules live in `decode_step.advance`, shared with the continuous
engine (`continuous.py`); row i's random key is folded from (i, completion
index), so a row's samples do not depend on its batch neighbours.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from nemocascade.model import kv_cache, presets, transformer
from nemocascade.rollout import decode_step, sampling_methods
from nemocascade.sharding import hosts, rules as rules_lib

MIN_PROMPT_BUCKET = 16
MAX_STOP_IDS = decode_step.MAX_STOP_IDS
MAX_THINK_CLOSE_IDS = decode_step.MAX_THINK_CLOSE_IDS
_HOST_ARGS = ("prompt", "pad", "live", "budget", "answer_budget")
NO_BUDGET = decode_step.NO_BUDGET


@dataclasses.dataclass(frozen=True)
class Rollout:
    """Host arrays of one sampler call (B = number of prompts, M = max_new_tokens).

    Attributes:
      prompt_tokens: int32 [B, P], prompts left-padded with the pad id to the bucket P.
      prompt_lengths: int32 [B], real prompt tokens per row.
      completion_tokens: int32 [B, M], generated ids, pad id after the end.
      completion_mask: int32 [B, M], 1 on generated tokens (stop token included).
      logprobs: float32 [B, M], the sampler's log-probs, 0 on pads.
      forced_mask: int32 [B, M], 1 on tokens forced by the thinking budget.
      lengths: int32 [B], generated tokens per row (= completion_mask.sum(-1)).
      truncated: bool [B], the row ended without a stop token.
    """

    prompt_tokens: np.ndarray
    prompt_lengths: np.ndarray
    completion_tokens: np.ndarray
    completion_mask: np.ndarray
    logprobs: np.ndarray
    forced_mask: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Static:
    """Everything the compiled decode is specialised on besides array shapes."""

    model_cfg: presets.ModelConfig
    method: sampling_methods.Method
    max_new_tokens: int
    pad_id: int
    rules: rules_lib.Rules | None


@flax.struct.dataclass
class _State:
    step: jax.Array  # completion index of the token chosen next
    hidden_bd: jax.Array  # final hidden state at the last fed slot
    cache: Any
    tokens_bm: jax.Array
    logprobs_bm: jax.Array
    forced_bm: jax.Array
    mask_bm: jax.Array
    flags: decode_step.RowFlags


def prompt_bucket(length: int) -> int:
    """Smallest power of two >= length, at least `MIN_PROMPT_BUCKET`."""
    return max(MIN_PROMPT_BUCKET, 1 << max(length - 1, 0).bit_length())


def _decode(
    params, cache, prompt_bp, pad_b, live_b, budget_b, answer_budget_b, ids, rng, *, static
):
    """ids: {"stop": [MAX_STOP_IDS], "close": [MAX_THINK_CLOSE_IDS], "num_close": [], "end": []}."""
    cfg, m = static.model_cfg, static.max_new_tokens
    model = transformer.Transformer(cfg)
    w_dv = transformer.unembedding(params, cfg)
    b, p = prompt_bp.shape
    slots_p = jnp.arange(p, dtype=jnp.int32)
    seg_bp = (slots_p[None] >= pad_b[:, None]).astype(jnp.int32)
    pos_bp = jnp.maximum(slots_p[None] - pad_b[:, None], 0)
    hidden_btd, cache = model.apply(
        {"params": params}, prompt_bp, pos_bp, seg_bp, cache=cache, cache_index=0
    )
    request_b = jnp.arange(b, dtype=jnp.int32)

    def cond(s: _State):
        return (s.step < m) & ~jnp.all(s.flags.done_b)

    def body(s: _State) -> _State:
        # Logits of the current position only: [B, V], bounded by the batch.
        logits_bv = jnp.einsum(
            "bd,dv->bv",
            s.hidden_bd,
            w_dv.astype(s.hidden_bd.dtype),
            preferred_element_type=jnp.float32,
        )
        step_b = jnp.broadcast_to(s.step, (b,))
        active_b = ~s.flags.done_b
        tok_b, lp_b, forced_b, flags = decode_step.advance(
            logits_bv,
            sampling_methods.row_keys(rng, request_b, step_b),
            step_b,
            active_b,
            s.flags,
            budget_b,
            answer_budget_b,
            ids,
            method=static.method,
            pad_id=static.pad_id,
        )

        def put(buf_bm, val_b):
            return jax.lax.dynamic_update_slice_in_dim(
                buf_bm, val_b[:, None].astype(buf_bm.dtype), s.step, axis=1
            )

        slot = p + s.step
        hidden_b1d, cache = model.apply(
            {"params": params},
            tok_b[:, None],
            (slot - pad_b)[:, None],
            live_b[:, None].astype(jnp.int32),
            cache=s.cache,
            cache_index=slot,
        )
        return _State(
            step=s.step + 1,
            hidden_bd=hidden_b1d[:, 0],
            cache=cache,
            tokens_bm=put(s.tokens_bm, tok_b),
            logprobs_bm=put(s.logprobs_bm, lp_b),
            forced_bm=put(s.forced_bm, forced_b),
            mask_bm=put(s.mask_bm, active_b),
            flags=flags,
        )

    zeros_bm = jnp.zeros((b, m), jnp.int32)
    state = _State(
        step=jnp.zeros((), jnp.int32),
        hidden_bd=hidden_btd[:, -1],
        cache=cache,
        tokens_bm=jnp.full((b, m), static.pad_id, jnp.int32),
        logprobs_bm=jnp.zeros((b, m), jnp.float32),
        forced_bm=zeros_bm,
        mask_bm=zeros_bm,
        flags=decode_step.RowFlags.start(~live_b, budget_b),
    )
    s = jax.lax.while_loop(cond, body, state)
    out = {
        "completion_tokens": s.tokens_bm,
        "completion_mask": s.mask_bm,
        "logprobs": s.logprobs_bm,
        "forced_mask": s.forced_bm,
        "truncated": live_b & ~s.flags.stopped_b,
    }
    return out, s.cache


def _decode_with_rules(params, cache, *args, static):
    if static.rules is None:
        return _decode(params, cache, *args, static=static)
    with nn.logical_axis_rules(static.rules):
        return _decode(params, cache, *args, static=static)


# One compile per (prompt bucket, batch bucket, _Static); the cache is donated
# and returned so XLA aliases it through the loop instead of copying it.
_decode_jit = jax.jit(_decode_with_rules, static_argnames=("static",), donate_argnames=("cache",))


def _allocate_cache(model_cfg, batch: int, length: int, mesh, rules):
    abstract = jax.eval_shape(lambda: transformer.init_cache(model_cfg, batch, length))
    if mesh is None:
        return jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract)

    def zeros(a, names):
        sharding = jax.sharding.NamedSharding(mesh, rules_lib.spec(names, rules))
        return jnp.zeros(a.shape, a.dtype, device=sharding)

    return kv_cache.map_with_axes(zeros, abstract)


def left_padded(prompts: Sequence[Sequence[int]], rows: int, p: int, pad_id: int) -> np.ndarray:
    """int32 `[rows, p]`: prompt i right-aligned in row i (slots `p - len .. p - 1`), rest pad."""
    out = np.full((rows, p), pad_id, np.int32)
    for i, q in enumerate(prompts):
        out[i, p - len(q) :] = q
    return out


def per_row_budget(value: int | None | Sequence[int | None], n: int, name: str) -> np.ndarray:
    """`n` int32 budgets from one value or one per row (None = `NO_BUDGET`); `name` in errors."""
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries for {n} prompts")
    for v in values:
        if v is not None and v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return np.asarray([NO_BUDGET if v is None else v for v in values], np.int32)


def request_arrays(
    model_cfg: presets.ModelConfig,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    thinking_budget,
    think_close_ids: Sequence[int],
    think_end_id: int | None,
    answer_budget,
    pad_id: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Checked per-request arrays (prompt lengths, budgets) and the traced ids dict."""
    n = len(prompts)
    if n == 0 or any(len(q) == 0 for q in prompts):
        raise ValueError("generate needs at least one prompt and no empty prompt")
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
    lengths = np.asarray([len(q) for q in prompts], np.int32)
    if lengths.max() + max_new_tokens > model_cfg.max_seq_len:
        raise ValueError(
            f"longest prompt ({lengths.max()}) + max_new_tokens ({max_new_tokens}) exceeds "
            f"model.max_seq_len={model_cfg.max_seq_len}"
        )
    budget = per_row_budget(thinking_budget, n, "thinking_budget")
    answer = per_row_budget(answer_budget, n, "answer_budget")
    with_budget = bool((budget < NO_BUDGET).any())
    if with_budget and (not think_close_ids or think_end_id is None):
        raise ValueError("a thinking_budget needs think_close_ids and think_end_id")
    if len(stop_ids) > MAX_STOP_IDS or len(think_close_ids) > MAX_THINK_CLOSE_IDS:
        raise ValueError(
            f"at most {MAX_STOP_IDS} stop_ids and {MAX_THINK_CLOSE_IDS} think_close_ids"
        )
    ids = {
        "stop": np.full((MAX_STOP_IDS,), -1, np.int32),
        "close": np.full((MAX_THINK_CLOSE_IDS,), pad_id, np.int32),
        "num_close": np.int32(len(think_close_ids) if with_budget else 0),
        "end": np.int32(think_end_id if with_budget else -1),
    }
    ids["stop"][: len(stop_ids)] = stop_ids
    ids["close"][: len(think_close_ids)] = think_close_ids
    return lengths, budget, answer, ids


def generate(
    params: Any,
    model_cfg: presets.ModelConfig,
    prompts: Sequence[Sequence[int]],
    *,
    method: sampling_methods.Method,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    rng: jax.Array,
    thinking_budget: int | None | Sequence[int | None] = None,
    think_close_ids: Sequence[int] = (),
    think_end_id: int | None = None,
    answer_budget: int | None | Sequence[int | None] = None,
    pad_id: int = 0,
    mesh: jax.sharding.Mesh | None = None,
    rules: rules_lib.Rules | None = None,
) -> Rollout:
    """Samples a completion for every prompt (token id lists) in one jitted call.

    `thinking_budget` / `answer_budget` are one value or one per prompt (None =
    no budget); a budget needs `think_close_ids` (forced tokens) and
    `think_end_id` (the `</think>` id that closes the block naturally). With a
    `mesh`, params must already live on it; the batch is sharded over the
    data-parallel axes and the cache by the logical axes of `kv_cache.map_with_axes` under
    `rules` (default: the "decode" preset). On a multi-process mesh every
    process passes its own prompts and gets its own rows back; the processes
    agree on one prompt bucket and local batch bucket first.
    """
    n = len(prompts)
    lengths, budget, answer, ids = request_arrays(
        model_cfg,
        prompts,
        max_new_tokens=max_new_tokens,
        stop_ids=stop_ids,
        thinking_budget=thinking_budget,
        think_close_ids=think_close_ids,
        think_end_id=think_end_id,
        answer_budget=answer_budget,
        pad_id=pad_id,
    )

    dp, longest, rows = 1, int(lengths.max()), n
    if mesh is not None:
        rules = rules or rules_lib.get_rules("decode")
        dp = hosts.local_batch_shards(mesh, rules)
        # Each process holds its own prompts: agree on one (P, local batch) shape.
        longest, rows = (int(v) for v in hosts.max_over_processes(np.array([longest, n])))
    p, b = prompt_bucket(longest), hosts.pow2_bucket(rows, dp)
    prompt_bp = left_padded(prompts, b, p, pad_id)
    pad_b = np.full((b,), p, np.int32)
    pad_b[:n] = p - lengths
    live_b = np.arange(b) < n
    budget_b = np.full((b,), NO_BUDGET, np.int32)
    budget_b[:n] = budget
    answer_b = np.full((b,), NO_BUDGET, np.int32)
    answer_b[:n] = answer

    static = _Static(
        model_cfg=model_cfg,
        method=method,
        max_new_tokens=int(max_new_tokens),
        pad_id=int(pad_id),
        rules=rules if mesh is not None else None,
    )
    host = (prompt_bp, pad_b, live_b, budget_b, answer_b)
    if mesh is None:
        cache = _allocate_cache(model_cfg, b, p + max_new_tokens, None, None)
        out, _ = _decode_jit(params, cache, *host, ids, rng, static=static)
    else:
        with jax.set_mesh(mesh):
            global_b = b * jax.process_count()
            cache = _allocate_cache(model_cfg, global_b, p + max_new_tokens, mesh, rules)
            placed = rules_lib.put_batch(dict(zip(_HOST_ARGS, host, strict=True)), mesh, rules)
            host = tuple(placed[k] for k in _HOST_ARGS)
            out, _ = _decode_jit(params, cache, *host, ids, rng, static=static)
            out = hosts.local_rows(out, mesh, rules)  # this process's rows, in input order
    out = jax.device_get(out)
    mask = out["completion_mask"][:n]
    return Rollout(
        prompt_tokens=prompt_bp[:n],
        prompt_lengths=lengths,
        completion_tokens=out["completion_tokens"][:n],
        completion_mask=mask,
        logprobs=out["logprobs"][:n],
        forced_mask=out["forced_mask"][:n],
        lengths=mask.sum(axis=-1).astype(np.int32),
        truncated=out["truncated"][:n],
    )
