"""What every framework of `bench/peers.py` shares: the spec, the prompts, the reward, timing.

The orchestrator writes one `spec.json`; each runner (`peers_run_*.py`, one
subprocess per framework) reads it, does the same work and writes its
`result.json` plus `.npy` arrays (logits of the fixed batch, greedy tokens)
that the orchestrator compares. Prompts are rendered and tokenized once by the
project (built-in task-world tokenizer, thinking mode), so every framework
starts from the same ids; rewards are the project's math verifier on the
completion parsed by the project's chat template, whoever sampled it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Sequence

MODEL_FIELDS = dict(
    vocab_size=1024,
    d_model=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    d_ff=768,
    # Qwen3's base; Tunix 0.1.7's Qwen3 applies 1e6 whatever its config says.
    rope_theta=1_000_000.0,
    rms_eps=1e-6,
    qk_norm=True,
    tie_embeddings=True,
    max_seq_len=512,
)
TINY_MODEL_FIELDS = dict(MODEL_FIELDS, d_model=64, num_layers=1, head_dim=16, d_ff=128)
LOGIT_BATCH = (4, 32)  # rows, tokens of the same-weights check


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything a runner needs; written as JSON by the orchestrator."""

    workdir: str
    src_dir: str  # the project's export (`export/`, `model_config.json`)
    hf_dir: str  # `convert --to_hf` of it
    model: dict
    prompts_per_step: int
    group_size: int
    grpo_steps: int
    timed_from: int  # first timed step (1-based); earlier steps are warm-up
    grpo_new_tokens: int
    temperature: float
    lr: float
    decode_batches: tuple[int, ...]
    decode_new_tokens: int
    decode_repeats: int
    threads: int

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=1)

    @classmethod
    def load(cls, path: str) -> Spec:
        with open(path) as f:
            fields = json.load(f)
        fields["decode_batches"] = tuple(fields["decode_batches"])
        return cls(**fields)

    def out(self, framework: str, name: str) -> str:
        d = os.path.join(self.workdir, framework)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, name)


def tokenizer():
    from nemocascade.data import tokenizer as tokenizer_lib

    return tokenizer_lib.Tokenizer.load()


def thinking_mode(tok):
    from nemocascade.rollout import modes

    return modes.get("thinking", tok)


def math_examples(n: int, seed: int = 0) -> list:
    """The first `n` task-world math RL prompts, in the order the RL stage draws them
    (a pool of `n`: the stage's `rl.num_prompts`, `train.seed`)."""
    from nemocascade.data import pipelines

    loader = pipelines.rl_prompts(batch_size=1, seed=seed, domains=("math",), num_examples=n)
    out = []
    for batch in loader:
        out.extend(item["example"] for item in batch)
        if len(out) >= n:
            return out[:n]
    raise ValueError(f"the math RL pool has fewer than {n} prompts")


def prompt_ids(tok, examples) -> list[list[int]]:
    mode = thinking_mode(tok)
    return [list(mode.example_prompt(tok, ex)) for ex in examples]


def logit_batch(vocab_size: int) -> list[list[int]]:
    """A fixed [rows, tokens] batch of ids (no padding) for the same-weights check."""
    import numpy as np

    rows, length = LOGIT_BATCH
    return np.random.default_rng(0).integers(1, vocab_size, (rows, length)).tolist()


class MathReward:
    """The project's math verifier on completion ids, parsed by the project's template."""

    def __init__(self, tok):
        from nemocascade.rewards import registry

        self._tok = tok
        self._mode = thinking_mode(tok)
        self._verify = registry.for_domain("math")

    def __call__(self, example, completion_ids: Sequence[int]) -> float:
        ids = [int(i) for i in completion_ids]
        stops = set(self._mode.stop_ids)
        for j, i in enumerate(ids):  # keep the stop token, as the sampler reports it
            if i in stops:
                ids = ids[: j + 1]
                break
        parsed = self._mode.parser(ids)
        return float(self._verify(example.prompt, parsed["completion"], example).score)


def time_decode(call, repeats: int, generated_tokens: int):
    """Times `call()` (greedy decoding): one warm-up, then the best of `repeats` calls.

    Returns ({first_s, best_s, tok_s}, the last call's tokens).
    """
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    best, tokens = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = call()
        best = min(best, time.perf_counter() - t0)
    return {"first_s": first, "best_s": best, "tok_s": generated_tokens / best}, tokens


def summarize_steps(rows: list[dict], timed_from: int) -> dict:
    """Medians over steps >= `timed_from` (all steps when the run is shorter)."""
    timed = [r for r in rows if r["step"] >= timed_from] or rows[-1:]
    out = {"timed_steps": [r["step"] for r in timed]}
    for key in ("step_s", "generation_s", "reward_s", "train_s", "tokens", "reward_mean"):
        values = [r[key] for r in timed if r.get(key) is not None]
        if values:
            out[key] = statistics.median(values)
    if out.get("tokens") and out.get("generation_s"):
        out["gen_tokens_per_s"] = out["tokens"] / out["generation_s"]
    if out.get("tokens") and out.get("step_s"):
        out["step_tokens_per_s"] = out["tokens"] / out["step_s"]
    return out


def write_result(spec: Spec, framework: str, result: dict) -> None:
    with open(spec.out(framework, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
