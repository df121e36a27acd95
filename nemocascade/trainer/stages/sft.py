"""SFT stage: next-token cross-entropy on assistant tokens, both decoding modes.

Every SFT example is rendered in each configured mode (parallel thinking and
instruct answers to the same prompt, as in the paper's general-domain data);
the loss is the token mean over the global batch. Held-out loss on the eval
split is logged every `train.eval_every` steps; the generation-based eval
matrix runs at the end when `eval.num_per_domain > 0`.
"""

from __future__ import annotations

import logging
from typing import Any

import jax

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import chat_template, pipelines
from nemocascade.losses import sft as sft_loss
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import forward, loop, stage_eval, stage_setup, step as step_lib


def make_loss_fn(cfg: config_lib.Config):
    impl = cfg.train.logprob_impl or None

    def loss_fn(params, batch, rng):
        del rng
        logp, _ = forward.sequence_logprobs(params, cfg.model, batch, implementation=impl)
        num, den = sft_loss.cross_entropy(logp, batch["loss_mask"])
        return num, (den, {})

    return loss_fn


def make_eval_loss(cfg: config_lib.Config, rt: stage_setup.Runtime, batches: list[dict]):
    """Held-out token-mean loss over fixed eval batches."""
    loss_fn = make_loss_fn(cfg)

    @jax.jit
    def sums(params, batch):
        num, (den, _) = loss_fn(params, batch, None)
        return num, den

    def evaluate(params) -> dict[str, float]:
        if not batches:
            return {}
        num = den = 0.0
        with jax.set_mesh(rt.mesh):
            for b in batches:
                n, d = sums(params, rules_lib.put_batch(b, rt.mesh, rt.rules))
                num, den = num + float(n), den + float(d)
        return {"eval_loss": num / max(den, 1.0)}

    return evaluate


def loaders(cfg: config_lib.Config, tok, template=chat_template.DEFAULT):
    """Training batches and held-out batches (task world eval split, or `data.eval_files`).

    With `data.files` and no `data.eval_files` there is no held-out set: a
    real run never scores its loss on its own training records.
    """
    common_kw = dict(
        seq_len=cfg.train.seq_len,
        domains=cfg.data.domains,
        modes=cfg.data.modes,
        loss_turns=cfg.data.loss_turns,
        template=template,
        shard_index=jax.process_index(),
        shard_count=jax.process_count(),
    )
    per_process = cfg.train.batch_size // jax.process_count()
    train = pipelines.sft_loader(
        tok,
        batch_size=per_process,
        seed=cfg.train.seed,
        num_examples=cfg.data.num_examples,
        domain_weights=cfg.data.domain_weights,
        files=cfg.data.files,
        file_weights=cfg.data.file_weights,
        pack=cfg.data.pack,
        **common_kw,
    )
    if cfg.data.files and not cfg.data.eval_files:
        logging.info("[%s] no config.data.eval_files: no held-out loss", cfg.stage)
        return train, []
    held_out = pipelines.eval_batches(
        tok,
        batch_size=per_process,
        num_examples=cfg.data.eval_examples,
        files=cfg.data.eval_files,
        **common_kw,
    )
    return train, held_out


def run(cfg: config_lib.Config, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) the SFT stage; returns final metrics."""
    stage_dir = stage_setup.stage_dir(workdir, cfg.stage)
    if checkpointing.is_done(stage_dir):
        logging.info("[%s] already finished (%s); skipping", cfg.stage, stage_dir)
        return {}
    tok, template, _ = stage_setup.text_for(cfg, stage_dir)
    train, held_out = loaders(cfg, tok, template)
    rt = stage_setup.setup(cfg, workdir)
    state, data_state, _ = stage_setup.init_state(rt)
    if data_state:
        train.set_state(data_state)
    step_fn = step_lib.make_train_step(
        make_loss_fn(cfg),
        rt.tx,
        num_microbatches=cfg.train.num_microbatches,
        mesh=rt.mesh,
        rules=rt.rules,
        state_shardings=rt.state_shardings,
    )
    eval_loss = make_eval_loss(cfg, rt, held_out)

    def batches():
        for b in train:
            yield rules_lib.put_batch(b, rt.mesh, rt.rules)

    tokens = cfg.train.batch_size * cfg.train.seq_len
    evaluate = eval_loss if held_out else None
    state = loop.run_stage(cfg, rt, state, step_fn, batches(), train.get_state, tokens, evaluate)
    final = eval_loss(state.params)
    if final:
        rt.writer.write(cfg.train.steps, final)
        logging.info("[%s] final held-out loss %.4f", cfg.stage, final["eval_loss"])
    final.update(stage_eval.write_matrix(cfg, tok, template, rt, state.params))
    checkpointing.export_params(stage_dir, state.params, {"stage": cfg.stage, **final})
    rt.close()
    return final
