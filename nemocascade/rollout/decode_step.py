"""One decode step's token choice, per row: sampling, thinking-budget forcing, stops.

Shared by the static sampler (`decoding.py`, every row at the same completion
index) and the continuous engine (`continuous.py`, each slot at its own
index), so both apply exactly the same rules:

* A row with a budget starts inside an open think block. Once it has
  produced `budget_b` completion tokens without emitting `ids["end"]` it is
  forced to emit `ids["close"][:num_close]`, one per step (flagged `forced`),
  and may then answer for at most `answer_budget_b` tokens.
* A row finishes on a stop token or an exhausted answer budget (the caller
  adds the `max_new_tokens` limit).

The random key of a row depends only on (request index, completion index)
(`sampling_methods.row_keys`), never on the row's place in the batch.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from nemocascade.rollout import sampling_methods

NO_BUDGET = 2**30  # "unlimited" thinking / answer budget of a row
MAX_STOP_IDS = 8  # capacity of the traced stop-id array (padded with -1)
MAX_THINK_CLOSE_IDS = 16  # capacity of the traced forced-close array


@flax.struct.dataclass
class RowFlags:
    """Per-row decode flags, all `[B]`."""

    done_b: jax.Array  # finished (stop token or answer budget)
    stopped_b: jax.Array  # finished on a stop token
    think_open_b: jax.Array  # inside a think block with a budget
    force_pos_b: jax.Array  # -1 before forcing, then index into the close ids
    answer_left_b: jax.Array  # answer tokens left after a forced close

    @classmethod
    def start(cls, done_b: jax.Array, budget_b: jax.Array) -> RowFlags:
        b = done_b.shape[0]
        return cls(
            done_b=done_b,
            stopped_b=jnp.zeros((b,), bool),
            think_open_b=budget_b < NO_BUDGET,
            force_pos_b=jnp.full((b,), -1, jnp.int32),
            answer_left_b=jnp.full((b,), NO_BUDGET, jnp.int32),
        )


def advance(
    logits_bv: jax.Array,
    keys_b: jax.Array,
    step_b: jax.Array,
    active_b: jax.Array,
    flags: RowFlags,
    budget_b: jax.Array,
    answer_budget_b: jax.Array,
    ids: dict,
    *,
    method: sampling_methods.Method,
    pad_id: int,
) -> tuple[jax.Array, jax.Array, jax.Array, RowFlags]:
    """(token [B], log-prob [B], forced [B], new flags) of one step.

    `step_b` is each row's completion index; inactive rows get `pad_id`, log-prob
    0, forced False and unchanged `done`/`stopped`. `ids` = {"stop":
    [MAX_STOP_IDS], "close": [MAX_THINK_CLOSE_IDS], "num_close": [], "end": []}.
    """
    close, num_close = ids["close"], ids["num_close"]
    tok_b, lp_b = sampling_methods.choose(logits_bv, method, keys_b)
    start_b = flags.think_open_b & (step_b >= budget_b) & (flags.force_pos_b < 0)
    force_pos_b = jnp.where(start_b, 0, flags.force_pos_b)
    forced_b = (force_pos_b >= 0) & (force_pos_b < num_close)
    answering_b = (force_pos_b >= 0) & (force_pos_b == num_close)
    forced_tok_b = close[jnp.clip(force_pos_b, 0, MAX_THINK_CLOSE_IDS - 1)]
    tok_b = jnp.where(forced_b, forced_tok_b, tok_b)
    lp_b = jnp.where(forced_b, sampling_methods.logprob_of(logits_bv, forced_tok_b, method), lp_b)
    force_pos_b = force_pos_b + forced_b
    closed_b = forced_b & (force_pos_b == num_close)
    think_open_b = flags.think_open_b & (tok_b != ids["end"]) & ~closed_b
    answer_left_b = jnp.where(closed_b, answer_budget_b, flags.answer_left_b - answering_b)
    over_budget_b = (closed_b | answering_b) & (answer_left_b <= 0)

    tok_b = jnp.where(active_b, tok_b, pad_id)
    stop_b = active_b & jnp.isin(tok_b, ids["stop"])
    new = RowFlags(
        done_b=flags.done_b | stop_b | (active_b & over_budget_b),
        stopped_b=flags.stopped_b | stop_b,
        think_open_b=jnp.where(active_b, think_open_b, flags.think_open_b),
        force_pos_b=jnp.where(active_b, force_pos_b, flags.force_pos_b),
        answer_left_b=jnp.where(active_b, answer_left_b, flags.answer_left_b),
    )
    return tok_b, jnp.where(active_b, lp_b, 0.0), forced_b & active_b, new
