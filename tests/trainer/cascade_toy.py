"""Toy sizes for whole-cascade tests: 2 steps per stage, a 1-layer model, 8-token rollouts."""

from configs import cascade as cascade_config
from nemocascade import config as config_lib

TOY = {
    "model.d_model": 32,
    "model.num_layers": 1,
    "model.num_heads": 2,
    "model.num_kv_heads": 1,
    "model.head_dim": 16,
    "model.d_ff": 64,
    "train.steps": 2,
    "train.batch_size": 8,
    "train.num_microbatches": 1,
    "train.seq_len": 128,
    "train.log_every": 1,
    "train.checkpoint_every": 1,
    "train.eval_every": 100,
    "train.progress": False,
    "eval.num_per_domain": 1,
    "eval.max_new_tokens": 8,
    "eval.thinking_budget": 4,
    "eval.batch_size": 8,
}
RL_TOY = {
    "rl.prompts_per_step": 2,
    "rl.group_size": 4,
    "rl.eval_num": 1,
    "rl.num_prompts": 8,
    "rl.max_new_tokens": 8,
    "rl.verifier_workers": 0,
    "rl.curriculum": [],
}


def overrides(stages) -> str:
    """`cascade.set` giving every stage in `stages` the toy sizes."""
    items = []
    for stage in stages:
        extra = dict(TOY)
        if stage == "sft":
            extra.update({"data.num_examples": 8, "data.eval_examples": 2})
        elif stage == "rm":
            extra.update({"data.num_examples": 16, "data.eval_examples": 8})
        else:
            extra.update(RL_TOY)
        items += [f"{stage}.{k}={v!r}" for k, v in extra.items()]
    return ";".join(items)


def config(arg: str, stages) -> config_lib.Config:
    """`configs/cascade.py:<arg>` at toy sizes."""
    cd = cascade_config.get_config(arg)
    cd.cascade.set = overrides(stages)
    return config_lib.from_config_dict(cd)
