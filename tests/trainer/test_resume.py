"""Kill-and-resume equals an uninterrupted run (params and data position)."""

import dataclasses

import chex
import flax.linen as nn
import jax
import pytest

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import pipelines
from nemocascade.model import presets, transformer
from nemocascade.trainer.stages import sft


class Preempted(Exception):
    pass


def _cfg(workdir_steps: int = 6) -> config_lib.Config:
    model = presets.ModelConfig(
        vocab_size=1024,
        d_model=32,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        d_ff=64,
        max_seq_len=256,
    )
    base = config_lib.Config(stage="sft", model=model)
    return dataclasses.replace(
        base,
        train=dataclasses.replace(
            base.train,
            steps=workdir_steps,
            batch_size=8,
            seq_len=128,
            checkpoint_every=2,
            eval_every=100,
            log_every=1,
            progress=False,
        ),
        data=dataclasses.replace(base.data, num_examples=40, eval_examples=4),
        eval=dataclasses.replace(base.eval, num_per_domain=0),
        optim=dataclasses.replace(base.optim, lr=3e-3, warmup_steps=2),
    )


def _params(workdir, cfg):
    abstract = jax.eval_shape(
        lambda: nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(0)))
    )
    return checkpointing.load_params(f"{workdir}/sft", abstract)


def test_kill_and_resume_equals_uninterrupted(tmp_path, monkeypatch):
    cfg = _cfg()
    sft.run(cfg, str(tmp_path / "full"))

    real_loader = pipelines.sft_loader

    def dying_loader(*args, **kwargs):
        loader = real_loader(*args, **kwargs)
        calls = {"n": 0}
        original_next = type(loader).__next__

        class Dying(type(loader)):
            def __next__(self):
                calls["n"] += 1
                if calls["n"] > 5:  # steps 1..5 run; checkpoints at 2 and 4
                    raise Preempted()
                return original_next(self)

        loader.__class__ = Dying
        return loader

    monkeypatch.setattr(pipelines, "sft_loader", dying_loader)
    with pytest.raises(Preempted):
        sft.run(cfg, str(tmp_path / "resumed"))
    monkeypatch.setattr(pipelines, "sft_loader", real_loader)
    assert not checkpointing.is_done(str(tmp_path / "resumed" / "sft"))
    sft.run(cfg, str(tmp_path / "resumed"))  # same command: continues from step 4

    chex.assert_trees_all_close(
        _params(tmp_path / "full", cfg), _params(tmp_path / "resumed", cfg), atol=1e-6
    )
