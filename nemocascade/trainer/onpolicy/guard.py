"""In-stage forgetting guard: the cells a stage does not train must not drop.

With `eval.guard_tolerance > 0` an on-policy stage evaluates every domain ×
mode outside its own `rl.domains` (the eval matrix's pass@1 / chat gold, and
the pass@1 of each `eval.suites` benchmark of other domains) on its starting
params, and again at every `train.eval_every`. A cell more than the tolerance
below its starting value is logged as a WARNING; with
`eval.guard_stop` the stage stops there and finishes (own eval, eval matrix,
export) with the params of the last eval that respected the guard, kept in
`<stage>/checkpoints_guard`. The starting values are written to
`<stage>/guard_baseline.json`, so a resumed stage compares against the same
numbers. (The cascade's report compares whole stages with the best earlier
value of each cell; this guard acts inside a stage.)
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax

from nemocascade import checkpointing, config as config_lib
from nemocascade.evaluation import benchmarks, report
from nemocascade.sharding import rules as rules_lib
from nemocascade.trainer import stage_eval, stage_setup


def guarded_domains(cfg: config_lib.Config) -> tuple[str, ...]:
    """The eval domains the stage does not train on."""
    return tuple(d for d in cfg.eval.domains if d not in cfg.rl.domains)


class ForgettingGuard:
    """Checks the untrained cells at each eval; remembers the last params that passed."""

    def __init__(self, cfg: config_lib.Config, rt: stage_setup.Runtime, tok, template):
        self._cfg, self._rt = cfg, rt
        self._tol = cfg.eval.guard_tolerance
        self._domains = guarded_domains(cfg)
        self._tok, self._template = tok, template
        self._path = os.path.join(rt.stage_dir, "guard_baseline.json")
        self._manager = checkpointing.Manager(
            os.path.join(rt.stage_dir, "checkpoints_guard"), keep=1, async_save=False
        )
        self.baseline: dict[str, float] | None = None
        if os.path.exists(self._path):
            with open(self._path) as f:
                self.baseline = json.load(f)

    @property
    def active(self) -> bool:
        return bool(self._domains) or bool(self._cfg.eval.suites)

    def _cells(self, params) -> dict[str, float]:
        metrics = (
            stage_eval.matrix_cells(
                self._cfg, self._tok, self._template, self._rt, params, self._domains
            )
            if self._domains
            else {}
        )
        keys = [report.headline_key(d, m) for d in self._domains for m in self._cfg.eval.modes]
        cells = {k: metrics[k] for k in keys if k in metrics}
        suites = benchmarks.stage_cells(  # benchmark suites of untrained domains
            self._cfg,
            self._tok,
            self._template,
            self._rt.mesh,
            rules_lib.get_rules("decode"),
            params,
            skip_domains=self._cfg.rl.domains,
        )
        return {**cells, **{k: v for k, v in suites.items() if k.endswith("/pass@1")}}

    def start(self, state: Any, data_state: dict) -> None:
        """Baseline of the starting params (once per stage) and the first passing state."""
        if not self.active or self.baseline is not None:
            return
        self.baseline = self._cells(state.params)
        if jax.process_index() == 0:
            with open(self._path, "w") as f:
                json.dump(self.baseline, f, indent=1, sort_keys=True)
        self._manager.save(int(state.step), state, data_state, force=True)
        logging.info(
            "[%s] forgetting guard on %s (tolerance %.3f): %s",
            self._cfg.stage,
            ",".join(self._domains),
            self._tol,
            ", ".join(f"{k}={v:.3f}" for k, v in sorted(self.baseline.items())),
        )

    def check(self, step: int, state: Any, data_state: dict) -> bool:
        """Evaluates the guarded cells; True when the stage should stop here."""
        if not self.active:
            return False
        now = self._cells(state.params)
        self._rt.writer.write(step, {f"guard/{k}": v for k, v in now.items()})
        dropped = report.drops(self.baseline or {}, now, self._tol)
        if not dropped:
            if self._manager.latest_step() != step:  # a resumed stage may pass a step twice
                self._manager.save(step, state, data_state, force=True)
            return False
        for k, (was, is_) in sorted(dropped.items()):
            logging.warning(
                "[%s] FORGETTING at step %d: %s dropped from %.3f (stage start) to %.3f "
                "(tolerance %.3f)",
                self._cfg.stage,
                step,
                k,
                was,
                is_,
                self._tol,
            )
        return self._cfg.eval.guard_stop

    def restore_last_passing(self, stopped_at: int) -> Any:
        """The train state of the last eval that respected the guard (logged, recorded)."""
        kept = self._manager.latest_step()
        state, _ = self._manager.restore(self._rt.abstract_state, kept)
        logging.warning(
            "[%s] forgetting guard stopped the stage at step %d; finishing with step %d",
            self._cfg.stage,
            stopped_at,
            kept,
        )
        self._rt.writer.write(stopped_at, {"guard/stopped_at": stopped_at, "guard/kept_step": kept})
        return state

    def close(self) -> None:
        self._manager.close()
