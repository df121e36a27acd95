"""RL group sampling: layout, masks, parsing, and sampler log-probs == trainer log-probs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.rollout import groups, sampling_methods
from nemocascade.tasks import registry
from nemocascade.trainer import forward
from tests.rollout import helpers

CFG = helpers.TOY_MODEL_1K
MAX_NEW, BUDGET, GROUP = 24, 6, 2
# The fused kernel sums the vocabulary in tiles, the sampler in one reduction (observed ~1e-6).
ATOL = 1e-5


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


@pytest.fixture(scope="module")
def params():
    return helpers.random_params(CFG, head_scale=5.0)


@pytest.fixture(scope="module")
def examples():
    return registry.generate("math", "eval", 2) + registry.generate("if", "eval", 1)


def _sample(params, tok, examples, temperature, seed=0, **kw):
    return groups.sample_groups(
        params,
        CFG,
        tok,
        examples,
        group_size=GROUP,
        modes=["thinking", "instruct", "thinking"],
        method=sampling_methods.Sample(temperature=temperature),
        max_new_tokens=MAX_NEW,
        rng=jax.random.key(seed),
        thinking_budget=BUDGET,
        answer_budget=4,
        **kw,
    )


@pytest.mark.parametrize(
    "temperature, engine", [(1.0, "static"), (0.7, "static"), (0.7, "continuous")]
)
def test_sampler_logprobs_match_trainer_logprobs(params, tok, examples, temperature, engine):
    kw = {"engine": engine, "num_slots": 2} if engine == "continuous" else {}
    out = _sample(params, tok, examples, temperature, **kw)
    batch = {k: jnp.asarray(v) for k, v in out.batch.items()}
    logp, _ = forward.sequence_logprobs(params, CFG, batch, temperature=temperature)
    mask = out.batch["loss_mask"] > 0
    assert mask.sum() > 0
    np.testing.assert_allclose(
        np.asarray(logp)[mask], out.batch["sampler_logprobs"][mask], atol=ATOL
    )
    # Forced tokens carry the untruncated log-prob at T, also the trainer's value.
    n, t = out.batch["targets"].shape
    p = t - MAX_NEW
    forced = np.zeros((n, t), bool)
    completion = out.batch["segment_ids"][:, p:] > 0
    forced[:, p - 1 : t - 1] = completion & (out.batch["loss_mask"][:, p - 1 : t - 1] == 0)
    assert forced.sum() == out.num_forced.sum() > 0
    np.testing.assert_allclose(
        np.asarray(logp)[forced], out.batch["sampler_logprobs"][forced], atol=ATOL
    )


def test_layout_masks_and_parsing(params, tok, examples):
    out = _sample(params, tok, examples, 1.0, seed=1)
    n = len(examples) * GROUP
    assert len(out) == n
    np.testing.assert_array_equal(out.example_index, [0, 0, 1, 1, 2, 2])
    assert out.modes == ("thinking",) * 2 + ("instruct",) * 2 + ("thinking",) * 2
    b = out.batch
    p = b["inputs"].shape[1] - MAX_NEW
    assert all(v.shape == (n, p + MAX_NEW) for v in b.values())
    np.testing.assert_array_equal(b["targets"][:, :-1], b["inputs"][:, 1:])
    # Prompts are left-padded and rendered in each row's mode.
    for i, (ex_i, mode) in enumerate(zip(out.example_index, out.modes, strict=True)):
        ids = chat_template.render_example_prompt(tok, examples[ex_i], mode)
        np.testing.assert_array_equal(b["inputs"][i, p - len(ids) : p], ids)
        assert b["segment_ids"][i, : p - len(ids)].sum() == 0
        assert b["positions"][i, p - len(ids)] == 0
    # The loss covers sampled completion tokens only.
    assert b["loss_mask"][:, : p - 1].sum() == 0
    np.testing.assert_array_equal(b["loss_mask"].sum(-1), out.lengths - out.num_forced)
    close = chat_template.think_close_ids(tok)
    for i, mode in enumerate(out.modes):
        if mode == "instruct":
            assert out.num_forced[i] == 0
        elif out.lengths[i] > BUDGET:  # reached the budget: the close was forced
            np.testing.assert_array_equal(
                b["targets"][i, p - 1 + BUDGET : p - 1 + BUDGET + 4], close
            )
            assert out.num_forced[i] == len(close)
            assert "</think>" in out.completions[i] and out.thinking[i] is not None
    assert out.truncated.dtype == bool and not out.finished[out.truncated].any()


def test_invalid_arguments_raise(params, tok, examples):
    with pytest.raises(ValueError, match="group_size"):
        groups.sample_groups(
            params,
            CFG,
            tok,
            examples,
            group_size=0,
            modes="instruct",
            method=sampling_methods.Greedy(),
            max_new_tokens=4,
            rng=jax.random.key(0),
        )
    with pytest.raises(ValueError, match="modes has 1 entries"):
        groups.sample_groups(
            params,
            CFG,
            tok,
            examples,
            group_size=1,
            modes=["instruct"],
            method=sampling_methods.Greedy(),
            max_new_tokens=4,
            rng=jax.random.key(0),
        )
