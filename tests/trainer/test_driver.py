"""The on-policy driver with a fake algorithm: what it calls, records and writes."""

import numpy as np

from nemocascade import checkpointing, metrics as metrics_lib
from nemocascade.losses import sft as sft_loss
from nemocascade.trainer import forward
from nemocascade.trainer.onpolicy import driver
from tests.trainer import test_rl_stage

KEYS = ("inputs", "targets", "positions", "segment_ids", "loss_mask")


def _clone_loss(cfg, temperature):
    """Behaviour cloning of the sampled tokens: any differentiable loss will do."""
    del temperature

    def loss_fn(params, batch, rng):
        del rng
        logp, _ = forward.sequence_logprobs(params, cfg.model, batch)
        num, den = sft_loss.cross_entropy(logp, batch["loss_mask"])
        return num, (den, {})

    return loss_fn


class Fake:
    make_loss_fn = staticmethod(_clone_loss)
    instances = []

    def __init__(self, cfg, workdir, rt, tok, template, state):
        self.calls, self.closed = [], False
        Fake.instances.append(self)

    def prepare(self, step, examples, rollouts, phase, draw):
        del draw
        self.calls.append((step, [e.uid for e in examples], len(rollouts.lengths)))
        batch = {k: rollouts.batch[k] for k in KEYS}
        rates = [0.0] * len(examples)  # every prompt "unsolved"
        return driver.Prepared(batch, {"fake_rows": float(len(rollouts.lengths))}, rates)

    def progress(self, host):
        return {"rows": host["fake_rows"]}

    def close(self):
        self.closed = True


def test_driver_runs_the_fake_algorithm(tmp_path):
    cfg = test_rl_stage.toy_rl_config("stage1_short")
    final = driver.run(cfg, str(tmp_path), Fake)
    (fake,) = Fake.instances
    assert [c[0] for c in fake.calls] == [1, 2] and fake.closed
    assert all(c[2] == cfg.rl.prompts_per_step * cfg.rl.group_size for c in fake.calls)
    assert fake.calls[0][1] != fake.calls[1][1]  # the stream moves on
    rows = metrics_lib.read(str(tmp_path / "stage1_short" / "metrics.jsonl"))
    steps = [r for r in rows if "fake_rows" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["grad_norm"] > 0 and np.isfinite(r["loss"]) for r in steps)
    assert {"rollout_s", "train_s", "response_len_mean", "prompts_skipped"} <= set(steps[0])
    assert checkpointing.is_done(str(tmp_path / "stage1_short")) and isinstance(final, dict)
    # A finished stage is skipped without building the algorithm again.
    assert driver.run(cfg, str(tmp_path), Fake) == {} and len(Fake.instances) == 1
