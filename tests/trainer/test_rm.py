"""Reward-model stage and RLHF's RM reward: toy stage run, init from SFT, think-block handling."""

import math
import types

import chex
import flax.linen as nn
import jax
import numpy as np
import pytest

from configs import rlhf as rlhf_config, rm as rm_config
from nemocascade import checkpointing, config as config_lib, metrics as metrics_lib
from nemocascade.data import chat_template, pipelines, tokenizer as tokenizer_lib
from nemocascade.model import reward_head, transformer
from nemocascade.rollout import groups
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.tasks import base as tasks_base
from nemocascade.trainer.onpolicy import rm_scoring
from nemocascade.trainer.stages import rl, rm

TOY_MODEL = dict(
    d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, d_ff=64, max_seq_len=256
)
PROMPT = "Tell me about tea."
ANSWER = "Tea is made from dried leaf and hot water. Hope this helps."
_score = jax.jit(reward_head.score, static_argnums=1)
_pair_scores = jax.jit(rm.pair_scores, static_argnums=1)


def toy_config(init_from: str = "", **rm_opts) -> config_lib.Config:
    cd = rm_config.get_config("tiny")
    cd.model.update(TOY_MODEL)
    cd.train.update(
        steps=3, batch_size=8, log_every=1, eval_every=2, checkpoint_every=100, progress=False
    )
    cd.data.update(num_examples=64, eval_examples=12)  # 12 = one full + one padded batch
    cd.init.init_from = init_from
    cd.rm.update(rm_opts)
    return config_lib.from_config_dict(cd)


def export_policy(directory: str, cfg: config_lib.Config, seed: int = 5):
    policy = nn.meta.unbox(transformer.init_params(cfg.model, jax.random.key(seed)))
    checkpointing.export_params(directory, policy, {"stage": "sft"})
    return policy


def test_toy_rm_stage_starts_from_sft_logs_pairwise_accuracy_and_exports(tmp_path, monkeypatch):
    policy = export_policy(str(tmp_path / "sft"), toy_config())
    cfg = toy_config(init_from=str(tmp_path / "sft"))
    initial = {}

    def spy(cfg, rt):
        state, data = real_init_state(cfg, rt)
        initial.update(step=int(state.step), params=jax.device_get(state.params))
        return state, data

    real_init_state = rm.init_state
    monkeypatch.setattr(rm, "init_state", spy)
    final = rm.run(cfg, str(tmp_path))

    assert initial["step"] == 0
    chex.assert_trees_all_equal(initial["params"]["backbone"], policy)
    assert initial["params"]["head"]["kernel"].shape == (cfg.model.d_model,)
    records = metrics_lib.read(str(tmp_path / "rm" / "metrics.jsonl"))
    evals = [r for r in records if "pairwise_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]
    for r in evals:
        assert 0.0 <= r["pairwise_accuracy"] <= 1.0
        assert 0.0 <= r["pairwise_accuracy_noisy"] <= 1.0
        assert math.isfinite(r["eval_loss"])
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in train)
    assert final["pairwise_accuracy"] == evals[-1]["pairwise_accuracy"]
    assert checkpointing.is_done(str(tmp_path / "rm"))
    mesh = mesh_lib.make_mesh(cfg.mesh.shape)
    abstract = rm_scoring.abstract_params(cfg.model, mesh, rules_lib.get_rules("fsdp"))
    exported = checkpointing.load_params(str(tmp_path / "rm"), abstract)
    assert jax.tree.structure(exported) == jax.tree.structure(initial["params"])
    with pytest.raises(AssertionError):  # trained
        chex.assert_trees_all_close(exported["backbone"], policy)
    # A second run finds DONE and skips.
    assert rm.run(cfg, str(tmp_path)) == {}


def test_packed_pairs_score_as_if_alone():
    cfg = toy_config()
    params = nn.meta.unbox(reward_head.init_params(cfg.model, jax.random.key(4)))
    rng = np.random.default_rng(0)
    t = 16
    pairs = []
    for i in range(6):
        pair = {"gold_margin": np.float32(i)}  # the pair's id, to find its slot
        for side in rm.SIDES:
            n = int(rng.integers(3, t + 1))
            tokens = np.zeros(t, np.int32)
            tokens[:n] = rng.integers(1, cfg.model.vocab_size, n)
            pair[f"{side}_tokens"], pair[f"{side}_last"] = tokens, np.int32(n - 1)
        pairs.append(pair)
    alone = {
        side: _score(
            params,
            cfg.model,
            np.stack([p[f"{side}_tokens"] for p in pairs]),
            np.stack([p[f"{side}_tokens"] > 0 for p in pairs]),
            np.array([p[f"{side}_last"] for p in pairs]),
        )
        for side in rm.SIDES
    }
    for num_rows, want_dropped in ((None, 0), (1, 4)):  # 32 tokens hold at most two pairs
        packed, dropped = rm.pack_pairs(pairs, 2 * t, num_rows)
        r_c, r_r = _pair_scores(params, cfg.model, packed)
        valid = packed["valid"].reshape(-1) > 0
        ids = packed["gold_margin"].reshape(-1)[valid].astype(int)
        assert dropped >= want_dropped and len(ids) == len(pairs) - dropped
        np.testing.assert_allclose(r_c[valid], alone["chosen"][ids], atol=1e-5)
        np.testing.assert_allclose(r_r[valid], alone["rejected"][ids], atol=1e-5)
    assert packed["segment_ids"].max() <= 2 * rm.MAX_PAIRS_PER_ROW


def test_gold_correct_reads_flipped_labels():
    delta = np.array([1.0, -1.0, 1.0, -1.0, 0.0, 2.0], np.float32)
    margin = np.array([0.3, 0.3, -0.2, -0.2, 0.3, np.nan], np.float32)
    right, known = rm.gold_correct(delta, margin)
    np.testing.assert_array_equal(right, [1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(known, [1, 1, 1, 1, 1, 0])


def test_rm_options_are_validated_by_name():
    with pytest.raises(config_lib.ConfigError, match=r"config\.rm\.noise"):
        toy_config(noise=0.7)
    cd = rm_config.get_config("tiny")
    cd.rm.colour = "red"
    with pytest.raises(config_lib.ConfigError, match=r"config\.rm\.colour"):
        config_lib.from_config_dict(cd)
    cd = rm_config.get_config("tiny")
    cd.data.files = ("/tmp/pairs.jsonl",)
    with pytest.raises(config_lib.ConfigError, match=r"config\.data\.eval_files"):
        config_lib.from_config_dict(cd)


@pytest.fixture(scope="module")
def rewarder(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rlhf")
    cfg = toy_config()
    params = nn.meta.unbox(reward_head.init_params(cfg.model, jax.random.key(3)))
    checkpointing.export_params(str(workdir / "rm"), params, {"stage": "rm"})
    # One device: the scoring logic is under test here, not the sharding.
    mesh = mesh_lib.make_mesh((1, 1, 1), devices=jax.devices()[:1])
    rt = types.SimpleNamespace(mesh=mesh, rules=rules_lib.get_rules("fsdp"))
    tok = tokenizer_lib.Tokenizer.load()
    r = rm_scoring.RMRewarder(cfg, str(workdir), rt, tok)
    yield r, params, cfg, tok
    r.close()


def direct_score(params, cfg, tok, prompt: str, answer_text: str) -> float:
    """Reference: the RM alone on `render_rm_input(prompt, answer_text)`, one row."""
    ids = chat_template.render_rm_input(tok, prompt, answer_text)
    tokens = np.zeros((1, cfg.model.max_seq_len), np.int32)
    tokens[0, : len(ids)] = ids
    mask = (tokens > 0).astype(np.int32)
    return float(_score(params, cfg.model, tokens, mask, np.array([len(ids) - 1]))[0])


def test_rm_scores_only_the_answer_after_think(rewarder):
    r, params, cfg, tok = rewarder
    completions = [
        f"<think>\ntopic: tea. plan: a few facts.\n</think>\n\n{ANSWER}",
        f"<think>\nsomething else entirely, much longer {'and longer ' * 20}\n</think>\n\n{ANSWER}",
        ANSWER,  # instruct mode
        f"<think>\n\n</think>\n\n{ANSWER}",  # c2 instruct opener
    ]
    scores = r.score_texts([PROMPT] * 4, completions)
    np.testing.assert_allclose(scores, scores[2], atol=1e-5)
    np.testing.assert_allclose(scores[2], direct_score(params, cfg, tok, PROMPT, ANSWER), atol=1e-5)


def test_unfinished_think_is_scored_on_the_whole_text(rewarder):
    r, params, cfg, tok = rewarder
    unfinished = "<think>\ntopic: tea. plan: a few facts, then"
    assert chat_template.rm_answer(unfinished) == unfinished
    assert chat_template.rm_answer("<think>\nplan\n</think>\n\n") == ""
    got = r.score_texts([PROMPT], [unfinished])[0]
    np.testing.assert_allclose(got, direct_score(params, cfg, tok, PROMPT, unfinished), atol=1e-5)
    assert abs(got - direct_score(params, cfg, tok, PROMPT, "")) > 1e-4


def test_bucketed_batches_equal_single_unpadded_scores(rewarder):
    r, params, cfg, tok = rewarder
    answers = ["Sure.", " ".join([ANSWER] * 2), " ".join([ANSWER] * 6), " ".join([ANSWER] * 12)]
    prompts = [PROMPT, "Explain bees simply.", PROMPT, "Tell me about rain."]
    pairs = list(zip(prompts, answers, strict=True))
    lengths = [len(chat_template.render_rm_input(tok, p, a)) for p, a in pairs]
    assert sorted(set(np.searchsorted(rm_scoring.length_buckets(256), lengths))) == [0, 1, 2, 3]
    got = r.score_texts(prompts, answers)
    want = [direct_score(params, cfg, tok, p, a) for p, a in pairs]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_overlong_input_keeps_its_closing_token(rewarder):
    _, _, _, tok = rewarder
    ids = chat_template.rm_input_ids(tok, PROMPT, ANSWER * 40, chat_template.DEFAULT, 64)
    assert len(ids) == 64 and ids[-1] == tok.eos_id


def test_rewarder_call_maps_rollouts_to_their_prompts(rewarder):
    r, *_ = rewarder
    examples = [
        tasks_base.Example("a", "chat", 1, PROMPT, "", ""),
        tasks_base.Example("b", "chat", 1, "Explain bees simply.", "", ""),
    ]
    completions = [ANSWER, "Sure.", f"<think>\nx\n</think>\n\n{ANSWER}", "<think>\nx"]
    n = len(completions)
    rollouts = groups.RolloutBatch(
        example_index=np.array([0, 0, 1, 1], np.int32),
        modes=("instruct", "instruct", "thinking", "thinking"),
        completions=completions,
        thinking=[None] * n,
        answers=[None] * n,
        finished=np.ones(n, bool),
        truncated=np.zeros(n, bool),
        lengths=np.ones(n, np.int32),
        num_forced=np.zeros(n, np.int32),
        batch={},
    )
    got = r(examples, rollouts)
    assert got.dtype == np.float32 and got.shape == (4,)
    want = r.score_texts(
        [PROMPT, PROMPT, "Explain bees simply.", "Explain bees simply."], completions
    )
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_missing_rm_names_the_field(tmp_path):
    cfg = toy_config()
    rt = types.SimpleNamespace(
        mesh=mesh_lib.make_mesh(cfg.mesh.shape), rules=rules_lib.get_rules("fsdp")
    )
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.rm_from"):
        rm_scoring.RMRewarder(cfg, str(tmp_path), rt, tokenizer_lib.Tokenizer.load())


@pytest.mark.parametrize("size", ["tiny", "8b"])
def test_configs_build(size):
    rm_cfg = config_lib.from_config_dict(rm_config.get_config(size))
    assert rm_cfg.stage == "rm" and rm_cfg.train.steps == 0  # one epoch by default
    assert rm_cfg.rm == config_lib.RMConfig(noise=0.1, margin=0.0, epochs=1.0)
    rl = config_lib.from_config_dict(rlhf_config.get_config(size)).rl
    assert (rl.domains, rl.reward, rl.mode, rl.overlong) == (("chat",), "rm", "half_half", "none")
    assert rl.kl_coef == 0.0 and rl.entropy_coef == 0.0
    if size == "8b":
        assert (rl.temperature, rl.top_p, rl.group_size) == (0.6, 0.95, 8)


@pytest.mark.slow
def test_two_rlhf_steps_with_the_rm_reward(tmp_path):
    cd = rlhf_config.get_config("tiny")
    cd.model.update({**TOY_MODEL, "max_seq_len": 512})
    cd.train.update(
        steps=2, batch_size=8, num_microbatches=1, log_every=1, checkpoint_every=100, progress=False
    )
    cd.rl.update(prompts_per_step=2, group_size=4, eval_num=2, num_prompts=16, max_new_tokens=16)
    cd.eval.update(num_per_domain=0)
    cfg = config_lib.from_config_dict(cd)
    params = nn.meta.unbox(reward_head.init_params(cfg.model, jax.random.key(3)))
    checkpointing.export_params(str(tmp_path / "rm"), params, {"stage": "rm"})
    rl.run(cfg, str(tmp_path))
    steps = [
        r for r in metrics_lib.read(str(tmp_path / "rlhf" / "metrics.jsonl")) if "reward_mean" in r
    ]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["reward_mean"]) and math.isfinite(r["loss"]) for r in steps)
    assert checkpointing.is_done(str(tmp_path / "rlhf"))


def test_rm_input_ids_are_the_same_in_training_and_scoring(rewarder, monkeypatch):
    """The training pair rows and RLHF scoring build one layout, also when cut to length."""
    r, _, _, tok = rewarder
    seen = []
    monkeypatch.setattr(r, "_score_bucket", lambda ids, length, rows: seen.extend(ids) or 0.0)
    long_answer = f"<think>\nplan\n</think>\n\n{ANSWER * 40}"
    pair = {"prompt": PROMPT, "chosen": ANSWER, "rejected": long_answer}
    seq_len = r._buckets[-1]
    row = pipelines._pair_row(tok, pair, seq_len, chat_template.DEFAULT, pipelines._Counter("t", 1))
    r.score_texts([PROMPT, PROMPT], [ANSWER, long_answer])
    for side, scored in zip(("chosen", "rejected"), seen, strict=True):
        trained = row[f"{side}_tokens"][: row[f"{side}_last"] + 1].tolist()
        assert trained == list(scored)
        assert trained[-1] == tok.eos_id
    assert len(seen[1]) == seq_len  # the over-long answer was cut, keeping its closing token
