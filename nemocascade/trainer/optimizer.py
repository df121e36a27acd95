"""AdamW with warm-up + cosine/constant schedule and global-norm clipping."""

from __future__ import annotations

import jax
import optax

from nemocascade import config as config_lib


def schedule(cfg: config_lib.OptimConfig, total_steps: int) -> optax.Schedule:
    """Linear warm-up from `warmup_init_ratio·lr` to `lr`, then cosine or constant."""
    warm = max(cfg.warmup_steps, 0)
    init = cfg.lr * cfg.warmup_init_ratio
    if cfg.schedule == "constant":
        after = optax.constant_schedule(cfg.lr)
    else:
        decay = max(total_steps - warm, 1)
        after = optax.cosine_decay_schedule(cfg.lr, decay, alpha=cfg.min_lr_ratio)
    if warm == 0:
        return after
    return optax.join_schedules(
        [optax.linear_schedule(init, cfg.lr, warm), after], boundaries=[warm]
    )


def _decay_mask(params):
    # No weight decay on norm scales and other vectors, as is standard.
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make(cfg: config_lib.OptimConfig, total_steps: int) -> optax.GradientTransformation:
    parts = []
    if cfg.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(cfg.grad_clip))
    parts.append(
        optax.adamw(
            schedule(cfg, total_steps),
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=_decay_mask,
        )
    )
    return optax.chain(*parts)
