"""RLHF reward: the trained reward model scores each rollout's final answer.

What the RM sees (C1 §4.3): the request and the answer after `</think>`, in the
one RM layout (`chat_template.render_rm_input`), so thinking never influences
the reward. A response whose think block never closed is scored on its whole
text, which the RM (trained on finished answers only) tends to score low: the
paper's implicit length and incompleteness penalty.

Scoring runs on the device mesh: sequences are right-padded to power-of-two
length buckets and the rows of each bucket to a power-of-two batch (a
multiple of the data-parallel size), so one jitted forward compiles once per
(length, batch) shape. On several processes the per-bucket row counts are
agreed first, so every process runs the same sharded calls.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import flax.linen as nn
import jax
import numpy as np

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.model import presets, reward_head
from nemocascade.rollout import groups
from nemocascade.sharding import hosts, rules as rules_lib
from nemocascade.tasks import base as tasks_base

MIN_BUCKET = 32
TOKENS_PER_CALL = 1 << 16  # rows per forward = this / bucket length (at least the dp size)


def length_buckets(max_len: int) -> tuple[int, ...]:
    """Powers of two from `MIN_BUCKET`, the last one capped at `max_len`."""
    out, b = [], MIN_BUCKET
    while b < max_len:
        out.append(b)
        b *= 2
    return (*out, max_len)


def abstract_params(cfg: presets.ModelConfig, mesh, rules: rules_lib.Rules):
    """ShapeDtypeStructs of RM params, with their shardings on `mesh`."""
    boxed = jax.eval_shape(lambda r: reward_head.init_params(cfg, r), jax.random.key(0))
    shardings = rules_lib.logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
        nn.meta.unbox(boxed),
        shardings,
    )


class RMRewarder:
    """`rewarder(examples, rollouts) -> float32 [N]` from RM params exported by the RM stage.

    The RM has the shape of `cfg.model` and lives on the RL stage's mesh with
    its training sharding rules.
    """

    def __init__(
        self,
        cfg: config_lib.Config,
        workdir: str,
        rt,
        tok: tokenizer_lib.Tokenizer,
        template: chat_template.AnyTemplate = chat_template.DEFAULT,
    ):
        rm_dir = cfg.rl.rm_from or os.path.join(os.path.abspath(workdir), "rm")
        try:
            self._params = checkpointing.load_params(
                rm_dir, abstract_params(cfg.model, rt.mesh, rt.rules)
            )
        except FileNotFoundError as e:
            raise config_lib.ConfigError(f"config.rl.rm_from: {e}") from None
        logging.info("[%s] reward model from %s", cfg.stage, rm_dir)
        self._tok = tok
        self._template = template
        self._mesh, self._rules = rt.mesh, rt.rules
        self._dp_local = hosts.local_batch_shards(self._mesh, self._rules)
        self._buckets = length_buckets(cfg.model.max_seq_len)
        model, rules = cfg.model, rt.rules

        def forward(params, tokens_bt, mask_bt, last_b):
            with nn.logical_axis_rules(rules):
                return reward_head.score(params, model, tokens_bt, mask_bt, last_b)

        self._forward = jax.jit(
            forward, out_shardings=rules_lib.batch_sharding(rt.mesh, rules, ndim=1)
        )

    def __call__(
        self, examples: Sequence[tasks_base.Example], rollouts: groups.RolloutBatch
    ) -> np.ndarray:
        prompts = [chat_template.example_messages(examples[i]) for i in rollouts.example_index]
        return self.score_texts(prompts, list(rollouts.completions))

    def score_texts(self, prompts: Sequence, completions: Sequence[str]) -> np.ndarray:
        """RM scores of (request, full completion) pairs, float32 [N].

        Also the reward-hacking monitor: the RL stage can log these beside the
        gold rubric on held-out chat prompts.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        cap = self._buckets[-1]
        ids = [
            chat_template.rm_input_ids(self._tok, p, c, self._template, cap)
            for p, c in zip(prompts, completions, strict=True)
        ]
        bucket_of = np.searchsorted(self._buckets, [len(x) for x in ids])
        counts = np.bincount(bucket_of, minlength=len(self._buckets))
        counts = hosts.max_over_processes(counts)
        scores = np.zeros(len(ids), np.float32)
        for k, length in enumerate(self._buckets):
            if counts[k]:
                rows = np.flatnonzero(bucket_of == k)
                scores[rows] = self._score_bucket([ids[i] for i in rows], length, int(counts[k]))
        return scores

    def _score_bucket(self, ids: list[list[int]], length: int, num_rows: int) -> np.ndarray:
        """Scores `ids` (all ≤ `length`) in calls of a fixed row count; `num_rows` ≥ len(ids)."""
        dp = self._dp_local
        budget = max(1, TOKENS_PER_CALL // length)
        most = -(-(1 << (budget.bit_length() - 1)) // dp) * dp  # a power of two, ≥ dp
        per_call = min(most, hosts.pow2_bucket(num_rows, dp))
        num_calls = -(-num_rows // per_call)
        tokens = np.zeros((num_calls * per_call, length), np.int32)
        mask = np.zeros_like(tokens)
        last = np.zeros(num_calls * per_call, np.int32)
        for i, x in enumerate(ids):
            tokens[i, : len(x)], mask[i, : len(x)], last[i] = x, 1, len(x) - 1
        out = []
        with jax.set_mesh(self._mesh):
            for c in range(num_calls):
                sl = slice(c * per_call, (c + 1) * per_call)
                batch = rules_lib.put_batch(
                    {"tokens": tokens[sl], "mask": mask[sl], "last": last[sl]},
                    self._mesh,
                    self._rules,
                )
                r = self._forward(self._params, batch["tokens"], batch["mask"], batch["last"])
                out.append(hosts.local_rows(r, self._mesh, self._rules))
        return np.concatenate(out)[: len(ids)]

    def close(self):
        self._params = None
