"""Reward-model stage: Bradley–Terry on preference pairs, initialized from the SFT policy.

The RM is the policy's decoder plus a scalar head on the hidden state of the
closing `<|im_end|>` (`nemocascade.model.reward_head`); it sees the request and
the final answer only (`chat_template.render_rm_input`). Pairs come from the
built-in chat world (labelled by the hidden gold rubric, each label flipped
with probability `config.rm.noise`, default 0.1) or from `config.data.files`
(`{"prompt", "chosen", "rejected"}` records). As in the paper the default is
one epoch (`config.train.steps = 0` → `config.rm.epochs` × pairs / batch).

Both sequences of a pair share one packed row (segments, restarted
positions): a step's `train.batch_size` pairs go into `rm.rows_per_pair` ×
that many rows of 2 × `train.seq_len` tokens, first-fit decreasing; a pair
that fits nowhere is dropped (counted as `pairs_dropped_frac`; 1.0 never
drops). Built-in chat pairs average ~45% of two padded sequences, so the
default 0.5 halves the step's tokens while dropping ~1% of pairs.

Held-out pairwise accuracy on the eval split is written as `pairwise_accuracy`
(against the gold preference; for JSONL pairs, against their labels) and
`pairwise_accuracy_noisy` (against the possibly flipped labels) to
`DIR/rm/metrics.jsonl` every `train.eval_every` steps and at the end; the
params go to `DIR/rm/export` for RLHF (`config.rl.rm_from`).

RM-specific knobs live in the config's `rm` section (`config.RMConfig`):
noise, margin (Bradley–Terry margin, 0 as in the paper), epochs, rows_per_pair.
Training from `config.data.files` needs held-out pairs in `config.data.eval_files`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import pipelines
from nemocascade.losses import reward_model as rm_loss
from nemocascade.model import presets, reward_head
from nemocascade.sharding import hosts, rules as rules_lib
from nemocascade.trainer import loop, stage_setup, state as state_lib, step as step_lib

SIDES = ("chosen", "rejected")
MAX_PAIRS_PER_ROW = 8


def _init_boxed(cfg: presets.ModelConfig, tx, rng) -> state_lib.TrainState:
    params = reward_head.init_params(cfg, rng)
    return state_lib.TrainState(
        step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params)
    )


def abstract_state(cfg: presets.ModelConfig, tx, mesh, rules: rules_lib.Rules):
    """(abstract RM TrainState with shardings, sharding tree), as `state.abstract_state`."""
    boxed = jax.eval_shape(lambda r: _init_boxed(cfg, tx, r), jax.random.key(0))
    shardings = rules_lib.logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
    abstract = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
        nn.meta.unbox(boxed),
        shardings,
    )
    return abstract, shardings


def setup(cfg: config_lib.Config, workdir: str) -> stage_setup.Runtime:
    """`stage_setup.setup` with the RM's train state (backbone + head) in place of the policy's."""
    rt = stage_setup.setup(cfg, workdir, total_steps=cfg.train.steps)
    abstract, shardings = abstract_state(cfg.model, rt.tx, rt.mesh, rt.rules)
    return dataclasses.replace(rt, abstract_state=abstract, state_shardings=shardings)


def init_state(cfg: config_lib.Config, rt: stage_setup.Runtime) -> tuple[Any, dict]:
    """RM train state by the resume order; `init.init_from` names policy params (SFT)."""
    rng = jax.random.key(cfg.train.seed)
    backbone = rt.abstract_state.params["backbone"]

    def fresh():
        if cfg.init.init_from:
            policy = checkpointing.load_params(cfg.init.init_from, backbone)
            init = jax.jit(
                lambda p, r: state_lib.from_params(reward_head.init_from_policy(p, r), rt.tx),
                out_shardings=rt.state_shardings,
            )
            with jax.set_mesh(rt.mesh):
                return init(policy, rng)
        init = jax.jit(
            lambda r: nn.meta.unbox(_init_boxed(cfg.model, rt.tx, r)),
            out_shardings=rt.state_shardings,
        )
        with jax.set_mesh(rt.mesh):
            return init(rng)

    # `init.init_from` names policy params, not an RM state: `fresh` loads them.
    state, data, where = stage_setup.restore(rt, fresh, None, init_from="")
    if where == "scratch" and cfg.init.init_from:
        where = f"init_from {cfg.init.init_from} (policy backbone, fresh head)"
    logging.info("[%s] state from %s", cfg.stage, where)
    return state, data


def pack_pairs(pairs: list[dict], row_len: int, num_rows: int | None) -> tuple[dict, int]:
    """Packs preference pairs into rows, both sequences of a pair in one row.

    First-fit decreasing by pair length, at most `MAX_PAIRS_PER_ROW` pairs a
    row; a row holds chosen_0, rejected_0, chosen_1, … as segments 1, 2, 3, …
    with positions restarting at 0. With `num_rows` fixed, pairs that fit
    nowhere are dropped (returned count); with None, rows are added as needed.

    Args:
      pairs: host rows of `pipelines.preference_loader` (`{side}_tokens`,
        `{side}_last`, `gold_margin`), each side at most `row_len // 2` long.

    Returns:
      ({tokens, segment_ids, positions: [R, row_len], last: [R, 2Q] (in-row
      index of each sequence's final token), valid, gold_margin: [R, Q]},
      number of dropped pairs), Q = `MAX_PAIRS_PER_ROW`.
    """
    q = MAX_PAIRS_PER_ROW
    sizes = [int(p["chosen_last"]) + int(p["rejected_last"]) + 2 for p in pairs]
    rows: list[list[int]] = [[] for _ in range(num_rows or 0)]
    used: list[int] = [0] * len(rows)
    dropped = 0
    for i in sorted(range(len(pairs)), key=lambda i: -sizes[i]):
        r = next(
            (r for r in range(len(rows)) if used[r] + sizes[i] <= row_len and len(rows[r]) < q),
            None,
        )
        if r is None and num_rows is None:
            rows.append([])
            used.append(0)
            r = len(rows) - 1
        if r is None:
            dropped += 1
            continue
        rows[r].append(i)
        used[r] += sizes[i]
    n = len(rows)
    out = {
        "tokens": np.zeros((n, row_len), np.int32),
        "segment_ids": np.zeros((n, row_len), np.int32),
        "positions": np.zeros((n, row_len), np.int32),
        "last": np.zeros((n, 2 * q), np.int32),
        "valid": np.zeros((n, q), np.float32),
        "gold_margin": np.zeros((n, q), np.float32),
    }
    for r, members in enumerate(rows):
        start = 0
        for j, i in enumerate(members):
            for s, side in enumerate(SIDES):
                length = int(pairs[i][f"{side}_last"]) + 1
                sl = slice(start, start + length)
                out["tokens"][r, sl] = pairs[i][f"{side}_tokens"][:length]
                out["segment_ids"][r, sl] = 2 * j + s + 1
                out["positions"][r, sl] = np.arange(length)
                out["last"][r, 2 * j + s] = start + length - 1
                start += length
            out["valid"][r, j] = 1.0
            out["gold_margin"][r, j] = pairs[i]["gold_margin"]
    return out, dropped


def unbatch(batch: dict) -> list[dict]:
    """A loader batch of B pairs → B host rows."""
    n = len(batch["gold_margin"])
    return [{k: v[i] for k, v in batch.items()} for i in range(n)]


def pair_scores(params, cfg: presets.ModelConfig, batch) -> tuple[jax.Array, jax.Array]:
    """(r_chosen, r_rejected), each [R · Q], of a packed batch (`pack_pairs`)."""
    r_rk = reward_head.score_rows(
        params, cfg, batch["tokens"], batch["segment_ids"], batch["positions"], batch["last"]
    )
    r_pairs = r_rk.reshape(-1, 2)  # slots 2j, 2j + 1 = chosen, rejected of pair j
    return r_pairs[:, 0], r_pairs[:, 1]


def gold_correct(delta_b: jax.Array, gold_margin_b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(1[RM agrees with the gold preference], 1[gold known]) per pair.

    `gold_margin` < 0 marks a flipped label: the gold-preferred side is then
    the labelled `rejected`. NaN (JSONL) means no gold label.
    """
    known_b = jnp.isfinite(gold_margin_b)
    right_b = jnp.where(gold_margin_b > 0, delta_b > 0, delta_b < 0) & known_b
    return right_b.astype(jnp.float32), known_b.astype(jnp.float32)


def make_loss_fn(cfg: config_lib.Config, margin: float):
    def loss_fn(params, batch, rng):
        del rng
        r_c, r_r = pair_scores(params, cfg.model, batch)
        valid = batch["valid"].reshape(-1)
        num, den, metrics = rm_loss.bradley_terry_loss(r_c, r_r, margin=margin, mask_b=valid)
        gold_margin = jnp.where(valid > 0, batch["gold_margin"].reshape(-1), jnp.nan)
        right, known = gold_correct(jax.lax.stop_gradient(r_c - r_r), gold_margin)
        metrics = dict(metrics, gold_accuracy=(right.sum(), known.sum()))
        return num, (den, metrics)

    return loss_fn


def eval_batches(
    cfg: config_lib.Config, tok, opts: config_lib.RMConfig, template, rows: int
) -> list:
    """Every held-out pair once, packed into batches of `rows` rows (none dropped)."""
    loader = pipelines.preference_loader(
        tok,
        seq_len=cfg.train.seq_len,
        batch_size=1,
        seed=cfg.train.seed,
        num_pairs=cfg.data.eval_examples,
        noise=opts.noise,
        split="eval",
        files=cfg.data.eval_files,
        template=template,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
        num_epochs=1,
    )
    pairs = [row for b in loader for row in unbatch(b)]
    if not pairs:
        raise config_lib.ConfigError("no held-out preference pairs (config.data.eval_examples)")
    packed, _ = pack_pairs(pairs, 2 * cfg.train.seq_len, None)
    num_batches = -(-len(packed["tokens"]) // rows)
    num_batches = hosts.max_over_processes(num_batches)  # every process: the same calls
    pad = num_batches * rows - len(packed["tokens"])
    packed = {
        k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in packed.items()
    }
    return [
        {k: v[i * rows : (i + 1) * rows] for k, v in packed.items()} for i in range(num_batches)
    ]


def make_evaluate(
    cfg: config_lib.Config, rt: stage_setup.Runtime, batches: list[dict], margin: float
):
    """params → {pairwise_accuracy (gold), pairwise_accuracy_noisy (labels), eval_loss, …}."""
    loss_fn = make_loss_fn(cfg, margin)

    @jax.jit
    def sums(params, batch):
        with nn.logical_axis_rules(rt.rules):
            num, (den, m) = loss_fn(params, batch, None)
        return {"loss": (num, den), **m}

    def evaluate(params) -> dict[str, float]:
        total: dict[str, list[float]] = {}
        with jax.set_mesh(rt.mesh):
            for b in batches:
                out = jax.device_get(sums(params, rules_lib.put_batch(b, rt.mesh, rt.rules)))
                for k, (s, c) in out.items():
                    acc = total.setdefault(k, [0.0, 0.0])
                    acc[0], acc[1] = acc[0] + float(s), acc[1] + float(c)
        mean = {k: s / c if c > 0 else float("nan") for k, (s, c) in total.items()}
        gold_known = total["gold_accuracy"][1] > 0
        return {
            "pairwise_accuracy": mean["gold_accuracy"] if gold_known else mean["accuracy"],
            "pairwise_accuracy_noisy": mean["accuracy"],
            "eval_loss": mean["loss"],
            "eval_delta": mean["delta"],
        }

    return evaluate


def rows_per_process(cfg: config_lib.Config, rt: stage_setup.Runtime, rows_per_pair: float) -> int:
    """Packed rows of a step on this process, divisible into micro-batches over the data axes."""
    pairs = cfg.train.batch_size // jax.process_count()
    unit = hosts.local_batch_shards(rt.mesh, rt.rules) * cfg.train.num_microbatches
    return -(-max(1, math.ceil(pairs * rows_per_pair)) // unit) * unit


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) the reward model; returns the final held-out metrics."""
    stage_dir = stage_setup.stage_dir(workdir, cfg.stage)
    if checkpointing.is_done(stage_dir):
        logging.info("[%s] already finished (%s); skipping", cfg.stage, stage_dir)
        return {}
    opts = cfg.rm
    tok, template, _ = stage_setup.text_for(cfg, stage_dir)
    per_process = cfg.train.batch_size // jax.process_count()
    train = pipelines.preference_loader(
        tok,
        seq_len=cfg.train.seq_len,
        batch_size=per_process,
        seed=cfg.train.seed,
        num_pairs=cfg.data.num_examples or None,
        noise=opts.noise,
        split="sft",
        files=cfg.data.files,
        file_weights=cfg.data.file_weights,
        template=template,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )
    steps = cfg.train.steps or max(1, int(opts.epochs * train.epoch_size / per_process))
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps))
    rt = setup(cfg, workdir)
    state, data_state = init_state(cfg, rt)
    if data_state:
        train.set_state(data_state)
    logging.info(
        "[%s] %d pairs/process, label noise %.2f, %d steps of %d pairs (%.2f epochs)",
        cfg.stage,
        train.epoch_size,
        opts.noise,
        steps,
        cfg.train.batch_size,
        steps * per_process / max(train.epoch_size, 1),
    )
    step_fn = step_lib.make_train_step(
        make_loss_fn(cfg, opts.margin),
        rt.tx,
        num_microbatches=cfg.train.num_microbatches,
        mesh=rt.mesh,
        rules=rt.rules,
        state_shardings=rt.state_shardings,
    )
    rows = rows_per_process(cfg, rt, opts.rows_per_pair)
    evaluate = make_evaluate(cfg, rt, eval_batches(cfg, tok, opts, template, rows), opts.margin)
    counts = {"pairs": 0, "dropped": 0}

    def batches():
        for b in train:
            packed, dropped = pack_pairs(unbatch(b), 2 * cfg.train.seq_len, rows)
            counts["pairs"] += per_process
            counts["dropped"] += dropped
            yield rules_lib.put_batch(packed, rt.mesh, rt.rules)

    tokens = rows * jax.process_count() * 2 * cfg.train.seq_len
    state = loop.run_stage(
        cfg, rt, state, step_fn, batches(), train.get_state, tokens, evaluate, steps
    )
    final = evaluate(state.params)
    final["pairs_dropped_frac"] = counts["dropped"] / max(counts["pairs"], 1)
    rt.writer.write(steps, final)
    logging.info(
        "[%s] held-out pairwise accuracy %.3f vs gold, %.3f vs noisy labels",
        cfg.stage,
        final["pairwise_accuracy"],
        final["pairwise_accuracy_noisy"],
    )
    info = {"stage": cfg.stage, "noise": opts.noise, "steps": steps, **final}
    info = {k: v for k, v in info.items() if not (isinstance(v, float) and math.isnan(v))}
    checkpointing.export_params(stage_dir, state.params, info)
    rt.close()
    return final
