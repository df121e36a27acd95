"""The Tunix side of `bench/peers.py`: its `Sampler` and `GRPOLearner` (JAX, Flax NNX).

    python bench/peers_run_tunix.py SPEC_JSON

Loads the `convert --to_hf` directory with Tunix's own Qwen3 safetensors
loader. Tunix tokenizes with `ProjectTokenizer` (the project's SentencePiece
model behind Tunix's encode/decode/bos/eos/pad interface, no BOS added: the
same ids) and scores with `peers_common.MathReward`. Times: `rl_cluster.generate`
(generation), the learner's `_compute_rewards` (reward), `update_actor`
(train); a step is the time between two finished optimizer updates, as
Tunix's learner prepares the next batch in a thread while it trains.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import peers_common


class ProjectTokenizer:
    """The project's tokenizer with the methods `tunix.TokenizerAdapter` calls."""

    def __init__(self):
        self.nc = peers_common.tokenizer()

    def encode(self, text: str, **kwargs) -> list[int]:
        return self.nc.encode(str(text))

    def decode(self, ids, **kwargs) -> str:
        return self.nc.decode([int(i) for i in ids])

    def bos_id(self) -> int:
        return 0  # falsy: Tunix's sampler prepends no BOS (the project's prompts have none)

    def eos_id(self) -> int:
        return self.nc.eos_id

    def pad_id(self) -> int:
        return self.nc.pad_id


def _mesh():
    auto = (jax.sharding.AxisType.Auto,) * 2
    return jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=auto)


def load_model(spec, mesh):
    from tunix.models.qwen3 import model as qwen3_model, params as qwen3_params

    m = spec.model
    config = qwen3_model.ModelConfig(
        num_layers=m["num_layers"],
        vocab_size=m["vocab_size"],
        embed_dim=m["d_model"],
        hidden_dim=m["d_ff"],
        num_heads=m["num_heads"],
        head_dim=m["head_dim"],
        num_kv_heads=m["num_kv_heads"],
        rope_theta=int(m["rope_theta"]),
        norm_eps=m["rms_eps"],
        use_tied_embedding=m["tie_embeddings"],
    )
    with mesh:
        return qwen3_params.create_model_from_safe_tensors(spec.hf_dir, config, mesh)


def logits(model, ids) -> np.ndarray:
    tokens = jnp.asarray(ids, jnp.int32)
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
    out, _ = model(tokens, positions, None, mask)
    return np.asarray(out, np.float32)


def _bucket(prompts) -> int:
    return max(16, 1 << (max(len(p) for p in prompts) - 1).bit_length())


def decode(spec, model, tok, prompts, batch: int) -> tuple[dict, np.ndarray]:
    """Greedy (temperature 0), no stop token inside the vocabulary; best of `decode_repeats`."""
    import tunix

    n, p = spec.decode_new_tokens, _bucket(prompts)
    m = spec.model
    cache = tunix.CacheConfig(
        cache_size=p + n,
        num_layers=m["num_layers"],
        num_kv_heads=m["num_kv_heads"],
        head_dim=m["head_dim"],
    )
    sampler = tunix.Sampler(model, tok, cache)
    texts = [tok.nc.decode(q) for q in prompts[:batch]]

    def call():
        out = sampler(
            texts,
            max_generation_steps=n,
            max_prompt_length=p,
            eos_tokens=[m["vocab_size"]],
            temperature=0.0,
        )
        return np.stack([np.asarray(t)[:n] for t in out.tokens])

    return peers_common.time_decode(call, spec.decode_repeats, batch * n)


def _timed(fn, sink: list):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        sink.append((t0, time.perf_counter()))
        return out

    return wrapper


def grpo(spec, tok, mesh) -> dict:
    import optax
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    n = spec.prompts_per_step * spec.grpo_steps
    examples = peers_common.math_examples(n)
    prompts = peers_common.prompt_ids(tok.nc, examples)
    reward = peers_common.MathReward(tok.nc)
    by_uid = {ex.uid: ex for ex in examples}
    mode = peers_common.thinking_mode(tok.nc)
    p = _bucket(prompts)

    def math_reward(prompts, completions, uid, **kwargs):
        return [reward(by_uid[u], tok.nc.encode(c)) for u, c in zip(uid, completions, strict=True)]

    actor = load_model(spec, mesh)
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(spec.lr, b1=0.9, b2=0.95, weight_decay=0.0),
    )
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={r: mesh for r in rl_cluster_lib.Role},
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optimizer,
            eval_every_n_steps=10**6,
            max_steps=spec.grpo_steps,
        ),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=spec.grpo_new_tokens,
            max_prompt_length=p,
            kv_cache_size=p + spec.grpo_new_tokens,
            temperature=spec.temperature,
            top_p=1.0,
            top_k=None,
            eos_tokens=list(mode.stop_ids),
        ),
    )
    cluster = rl_cluster_lib.RLCluster(
        actor=actor, reference=None, tokenizer=tok, cluster_config=cluster_config
    )
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        algo_config=grpo_learner.GRPOConfig(
            num_generations=spec.group_size,
            num_iterations=1,
            beta=0.0,
            epsilon=0.2,
            loss_agg_mode="token-mean",
        ),
        reward_fns=[math_reward],
    )
    gen, rew, upd, lengths = [], [], [], []
    generate = cluster.generate

    def generate_counting(*args, **kwargs):
        out = generate(*args, **kwargs)
        lengths.append(sum(len(t) for t in out.tokens))
        return out

    cluster.generate = _timed(generate_counting, gen)
    compute_rewards, reward_means = learner._compute_rewards, []

    def rewards_with_mean(*args, **kwargs):
        out = compute_rewards(*args, **kwargs)
        reward_means.append(float(np.mean(out)))
        return out

    learner._compute_rewards = _timed(rewards_with_mean, rew)
    cluster.update_actor = _timed(cluster.update_actor, upd)
    texts = [tok.nc.decode(q) for q in prompts]
    uids, k = [ex.uid for ex in examples], spec.prompts_per_step
    data = [
        {"prompts": np.asarray(texts[i : i + k]), "uid": np.asarray(uids[i : i + k])}
        for i in range(0, n, k)
    ]
    t0 = time.perf_counter()
    learner.train(data)
    wall = time.perf_counter() - t0
    rows, prev = [], t0
    for i, (u0, u1) in enumerate(upd):
        g = gen[i][1] - gen[i][0] if i < len(gen) else None
        w = rew[i][1] - rew[i][0] if i < len(rew) else None
        rows.append(
            {
                "step": i + 1,
                "step_s": u1 - prev,
                "generation_s": g,
                "reward_s": w,
                "train_s": u1 - u0,
                "tokens": lengths[i] if i < len(lengths) else None,
                "reward_mean": reward_means[i] if i < len(reward_means) else None,
            }
        )
        prev = u1
    summary = peers_common.summarize_steps(rows, spec.timed_from)
    return {"steps": rows, "run_wall_s": wall, **summary}


def run(spec) -> None:
    import importlib.metadata

    tok = ProjectTokenizer()
    mesh = _mesh()
    model = load_model(spec, mesh)
    np.save(
        spec.out("tunix", "logits.npy"),
        logits(model, peers_common.logit_batch(spec.model["vocab_size"])),
    )
    prompts = peers_common.prompt_ids(tok.nc, peers_common.math_examples(max(spec.decode_batches)))
    result = {"version": importlib.metadata.version("google-tunix"), "decode": {}}
    for b in spec.decode_batches:
        result["decode"][str(b)], tokens = decode(spec, model, tok, prompts, b)
        np.save(spec.out("tunix", f"greedy_{b}.npy"), tokens)
        print(f"tunix decode batch {b}:", round(result["decode"][str(b)]["tok_s"]), "tok/s")
    if spec.grpo_steps > 0:
        result["grpo"] = grpo(spec, tok, mesh)
    peers_common.write_result(spec, "tunix", result)


if __name__ == "__main__":
    run(peers_common.Spec.load(sys.argv[1]))
