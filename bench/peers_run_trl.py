"""The TRL side of `bench/peers.py`: `transformers.generate` and `trl.GRPOTrainer` (PyTorch, CPU).

    python bench/peers_run_trl.py SPEC_JSON

Loads the `convert --to_hf` directory with `AutoModelForCausalLM`. TRL
tokenizes the rendered prompt texts with `ProjectTokenizer` (a transformers
tokenizer over the project's SentencePiece model: the same ids, checked here)
and scores with `peers_common.MathReward` on the completion ids it passes to
reward functions. Times: `_generate` (generation), `_calculate_rewards`
(reward), the rest of the optimizer step (train).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import peers_common
import torch
import transformers


class ProjectTokenizer(transformers.PreTrainedTokenizer):
    """The project's built-in SentencePiece tokenizer behind the transformers interface."""

    vocab_files_names = {}  # noqa: RUF012 (transformers class attribute)

    def __init__(self, **kwargs):
        self._nc = peers_common.tokenizer()
        super().__init__(pad_token="<pad>", eos_token="<|im_end|>", **kwargs)

    @property
    def vocab_size(self) -> int:
        return self._nc.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return {self._nc.piece(i): i for i in range(self._nc.vocab_size)}

    def _tokenize(self, text, **kwargs):
        return [self._nc.piece(i) for i in self._nc.encode(text)]

    def _convert_token_to_id(self, token):
        return self._nc.token_id(token)

    def _convert_id_to_token(self, index):
        return self._nc.piece(index)

    def convert_tokens_to_string(self, tokens):
        return self._nc.decode([self._nc.token_id(t) for t in tokens])


def load_model(spec):
    model = transformers.AutoModelForCausalLM.from_pretrained(spec.hf_dir, dtype=torch.float32)
    return model.eval()


def decode(spec, model, prompts, batch: int) -> tuple[dict, np.ndarray]:
    """Greedy, left-padded, every row decodes all tokens (stop id outside the vocabulary)."""
    rows = prompts[:batch]
    width = max(len(p) for p in rows)
    ids = torch.zeros((batch, width), dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(rows):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    n = spec.decode_new_tokens

    def call():
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=n,
                eos_token_id=spec.model["vocab_size"],
                pad_token_id=0,
            )
        return out[:, width:].numpy()

    return peers_common.time_decode(call, spec.decode_repeats, batch * n)


class _StepTimes(transformers.TrainerCallback):
    def __init__(self):
        self.rows, self._t0 = [], 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.rows.append({"step": state.global_step, "step_s": time.perf_counter() - self._t0})


def _timed(fn, sink: list):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        sink.append(time.perf_counter() - t0)
        return out

    return wrapper


def grpo(spec, tok) -> dict:
    import datasets
    import trl

    n = spec.prompts_per_step * spec.grpo_steps
    examples = peers_common.math_examples(n)
    texts = [tok._nc.decode(ids) for ids in peers_common.prompt_ids(tok._nc, examples)]
    reward = peers_common.MathReward(tok._nc)
    by_uid = {ex.uid: ex for ex in examples}

    def math_reward(prompts, completions, completion_ids, uid, **kwargs):
        return [reward(by_uid[u], c) for u, c in zip(uid, completion_ids, strict=True)]

    model = transformers.AutoModelForCausalLM.from_pretrained(spec.hf_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = list(peers_common.thinking_mode(tok._nc).stop_ids)
    model.generation_config.pad_token_id = tok.pad_token_id
    args = trl.GRPOConfig(
        output_dir=spec.out("trl", "grpo"),
        per_device_train_batch_size=spec.prompts_per_step * spec.group_size,
        num_generations=spec.group_size,
        max_completion_length=spec.grpo_new_tokens,
        temperature=spec.temperature,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        loss_type="dapo",  # token mean over the batch, as the project's `token_mean`
        scale_rewards="group",
        learning_rate=spec.lr,
        adam_beta1=0.9,
        adam_beta2=0.95,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=spec.grpo_steps,
        shuffle_dataset=False,
        remove_unused_columns=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    dataset = datasets.Dataset.from_list(
        [{"prompt": t, "uid": ex.uid} for t, ex in zip(texts, examples, strict=True)]
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=math_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
    )
    gen_s, reward_s, times = [], [], _StepTimes()
    trainer._generate = _timed(trainer._generate, gen_s)
    trainer._calculate_rewards = _timed(trainer._calculate_rewards, reward_s)
    trainer.add_callback(times)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    rows = []
    for r, g, w, log in zip(times.rows, gen_s, reward_s, logs, strict=False):
        tokens = log["completions/mean_length"] * spec.prompts_per_step * spec.group_size
        rows.append(
            dict(
                r,
                generation_s=g,
                reward_s=w,
                train_s=r["step_s"] - g - w,
                tokens=tokens,
                reward_mean=log.get("reward"),
            )
        )
    return {
        "steps": rows,
        "run_wall_s": wall,
        **peers_common.summarize_steps(rows, spec.timed_from),
    }


def run(spec) -> None:
    import trl

    torch.manual_seed(0)
    torch.set_num_threads(spec.threads)
    tok = ProjectTokenizer()
    nc_tok = tok._nc
    examples = peers_common.math_examples(max(spec.decode_batches))
    prompts = peers_common.prompt_ids(nc_tok, examples)
    texts = [nc_tok.decode(p) for p in prompts]
    same_ids = tok(text=texts)["input_ids"] == prompts
    model = load_model(spec)
    with torch.no_grad():
        ids = torch.tensor(peers_common.logit_batch(spec.model["vocab_size"]))
        np.save(spec.out("trl", "logits.npy"), model(ids).logits.float().numpy())
    result = {
        "version": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenizer_same_ids": bool(same_ids),
        "decode": {},
    }
    for b in spec.decode_batches:
        result["decode"][str(b)], tokens = decode(spec, model, prompts, b)
        np.save(spec.out("trl", f"greedy_{b}.npy"), tokens)
        print(
            f"transformers decode batch {b}: {result['decode'][str(b)]['tok_s']:.0f} tok/s",
            flush=True,
        )
    if spec.grpo_steps > 0:
        result["grpo"] = grpo(spec, tok)
    peers_common.write_result(spec, "trl", result)


if __name__ == "__main__":
    run(peers_common.Spec.load(sys.argv[1]))
