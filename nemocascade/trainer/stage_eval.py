"""Stage-side evaluation: the stage's own held-out score and the full eval matrix.

Both use greedy decoding on the eval split (`nemocascade.evaluation.matrix`).
The matrix is written to `DIR/<stage>/eval_matrix.json` at the end of every
stage, which the cascade report reads.
"""

from __future__ import annotations

import logging
import os

import jax

from nemocascade import config as config_lib
from nemocascade.evaluation import benchmarks, matrix
from nemocascade.sharding import rules as rules_lib


def _greedy_eval(cfg: config_lib.Config, tok, template, rt, params, **cells) -> dict[str, float]:
    """`matrix.evaluate` with the stage's decoding settings (`cfg.eval`) on the decode rules."""
    e = cfg.eval
    return matrix.evaluate(
        params,
        cfg.model,
        tok,
        max_new_tokens=e.max_new_tokens,
        thinking_budget=e.thinking_budget,
        batch_size=e.batch_size,
        template=template,
        mesh=rt.mesh,
        rules=rules_lib.get_rules("decode"),
        **cells,
    )


def own_domain_eval(cfg: config_lib.Config, tok, template, rt):
    """params → {"eval/<domain>/<mode>/pass@1": …} on the stage's own domains and modes."""

    def evaluate(params) -> dict[str, float]:
        if cfg.rl.eval_num <= 0:
            return {}
        r = cfg.rl
        out = _greedy_eval(
            cfg, tok, template, rt, params,
            domains=r.domains, modes=r.train_modes, num_per_domain=r.eval_num,
        )  # fmt: skip
        return {f"eval/{k}": v for k, v in out.items()}

    return evaluate


def matrix_cells(cfg: config_lib.Config, tok, template, rt, params, domains) -> dict[str, float]:
    """The eval matrix (settings of `cfg.eval`, both its modes) restricted to `domains`."""
    e = cfg.eval
    return _greedy_eval(
        cfg, tok, template, rt, params,
        domains=domains, modes=e.modes, num_per_domain=e.num_per_domain,
    )  # fmt: skip


def write_matrix(cfg: config_lib.Config, tok, template, rt, params) -> dict[str, float]:
    """Every domain × mode; written to `<stage_dir>/eval_matrix.json`."""
    if cfg.eval.num_per_domain <= 0:
        return {}
    metrics = matrix_cells(cfg, tok, template, rt, params, cfg.eval.domains)
    rules = rules_lib.get_rules("decode")  # benchmark suites (config.eval.suites), same keys
    metrics.update(benchmarks.stage_cells(cfg, tok, template, rt.mesh, rules, params))
    if jax.process_index() == 0:
        matrix.write(os.path.join(rt.stage_dir, "eval_matrix.json"), cfg.stage, metrics)
    logging.info(
        "[%s] eval matrix: %s",
        cfg.stage,
        ", ".join(
            f"{k}={v:.3f}" for k, v in sorted(metrics.items()) if "pass@1" in k or "gold" in k
        ),
    )
    return metrics
