"""Tests of the dual-mode chat template: exact layouts, masks, round trips."""

import dataclasses

import pytest

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.tasks import base, registry

C1 = chat_template.Template(style="c1")
C2 = chat_template.Template(style="c2")
TINY = base.Example(
    uid="tiny",
    domain="math",
    difficulty=0,
    prompt="Compute 1 + 2.",
    thinking="1+2=3",
    answer="\\boxed{3}",
)
USER = ["<|im_start|>", "user", "\n", "Compute", "▁", "1", "▁+", "▁", "2", "."]
ASSISTANT = ["<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"]
THINK_BODY = ["1", "+", "2", "=", "3", "\n", "</think>", "\n", "\n"]
ANSWER = ["\\", "boxed", "{", "3", "}", "<|im_end|>"]


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


@pytest.mark.parametrize(
    "template, mode, prompt, target",
    [
        (
            C1,
            "thinking",
            USER + ["▁", "/think"] + ASSISTANT,
            ["<think>", "\n"] + THINK_BODY + ANSWER,
        ),
        (C1, "instruct", USER + ["▁", "/no_think"] + ASSISTANT, ANSWER),
        (C2, "thinking", USER + ASSISTANT + ["<think>", "\n"], THINK_BODY + ANSWER),
        (
            C2,
            "instruct",
            USER + ASSISTANT + ["<think>", "\n", "\n", "</think>", "\n", "\n"],
            ANSWER,
        ),
    ],
)
def test_exact_layout(tok, template, mode, prompt, target):
    tokens, mask = chat_template.render_sft(tok, TINY, mode, template)
    assert tok.pieces(tokens) == prompt + target
    assert mask == [0] * len(prompt) + [1] * len(target)
    assert tok.pieces(chat_template.render_example_prompt(tok, TINY, mode, template)) == prompt


def test_exact_text():
    messages = [{"role": "user", "content": "Hi"}]
    assert chat_template.prompt_text(messages, "thinking") == (
        "<|im_start|>user\nHi /think<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat_template.assistant_target(TINY, "thinking") == (
        "<think>\n1+2=3\n</think>\n\n\\boxed{3}<|im_end|>"
    )
    assert chat_template.assistant_target(TINY, "instruct", C2) == "\\boxed{3}<|im_end|>"
    assert chat_template.prompt_text(messages, "instruct", C2).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_target_matches_registry_completion_text():
    # Verifiers read `registry.completion_text`; the SFT target is that plus <|im_end|>.
    for mode, thinking in (("thinking", TINY.thinking), ("instruct", None)):
        expected = registry.completion_text(thinking, TINY.answer) + "<|im_end|>"
        assert chat_template.assistant_target(TINY, mode) == expected


def test_system_and_multi_turn(tok):
    template = chat_template.Template(system="Be brief.")
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    text = chat_template.prompt_text(messages, "instruct", template)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\na /no_think<|im_end|>\n"
        "<|im_start|>assistant\nb<|im_end|>\n"
        "<|im_start|>user\nc /no_think<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    own_system = [{"role": "system", "content": "S"}] + messages
    assert chat_template.prompt_text(own_system, "instruct", template).count("system") == 1
    assert tok.decode(chat_template.render_prompt(tok, messages, "instruct", template)) == text


def test_invalid_arguments():
    with pytest.raises(ValueError, match="style"):
        chat_template.Template(style="c3")
    with pytest.raises(ValueError, match="mode"):
        chat_template.prompt_text([{"role": "user", "content": "x"}], "fast")
    with pytest.raises(ValueError, match="end with a user"):
        chat_template.prompt_text([{"role": "assistant", "content": "x"}], "instruct")
    with pytest.raises(dataclasses.FrozenInstanceError):
        C1.style = "c2"


@pytest.mark.parametrize("template", [C1, C2])
@pytest.mark.parametrize("mode", base.MODES)
@pytest.mark.parametrize("domain", base.DOMAINS)
def test_sft_round_trip_and_mask(tok, template, mode, domain):
    for example in registry.generate(domain, "sft", 5, seed=1):
        tokens, mask = chat_template.render_sft(tok, example, mode, template)
        prompt = chat_template.render_example_prompt(tok, example, mode, template)
        target = chat_template.assistant_target(example, mode, template)
        messages = [{"role": "user", "content": example.prompt}]
        full = chat_template.prompt_text(messages, mode, template) + target
        # Prompt and target tokenized apart == tokenized together.
        assert tokens == tok.encode(full)
        assert tokens[: len(prompt)] == prompt
        assert tok.decode(tokens) == full
        assert tok.decode([t for t, m in zip(tokens, mask, strict=True) if m]) == target
        assert mask[-1] == 1 and tokens[-1] == tok.eos_id
        assert sum(mask) == len(tokens) - len(prompt)

        parsed = chat_template.parse_completion(tok, tokens[len(prompt) :], mode, template)
        assert parsed["finished"]
        assert parsed["answer"].strip() == example.answer
        if mode == "thinking":
            assert parsed["thinking"].strip() == example.thinking
            assert parsed["completion"] == registry.completion_text(
                example.thinking, example.answer
            )


def test_parse_stops_at_first_stop_token(tok):
    answer = tok.encode("\\boxed{3}")
    junk = tok.encode("more text")
    parsed = chat_template.parse_completion(tok, answer + [tok.eos_id] + junk, "instruct")
    assert parsed["completion"] == "\\boxed{3}" and parsed["finished"]
    im_start = tok.token_id("<|im_start|>")
    parsed = chat_template.parse_completion(tok, answer + [im_start] + junk, "instruct")
    assert parsed["completion"] == "\\boxed{3}" and not parsed["finished"]
    parsed = chat_template.parse_completion(tok, answer, "instruct")
    assert not parsed["finished"]


def test_unfinished_think_block_has_no_answer(tok):
    ids = tok.encode("<think>\nstill going")
    parsed = chat_template.parse_completion(tok, ids, "thinking")
    assert parsed["answer"] is None


def test_rm_input_has_answer_only(tok):
    ids = chat_template.render_rm_input(tok, "Say hi.", "Hello there.")
    assert tok.decode(ids) == (
        "<|im_start|>user\nSay hi. /no_think<|im_end|>\n<|im_start|>assistant\n"
        "Hello there.<|im_end|>"
    )
    assert tok.token_id("<think>") not in ids


def test_stop_and_budget_tokens(tok):
    assert chat_template.mode_stop_ids(tok) == (5, 4)
    assert tok.pieces(chat_template.think_close_ids(tok)) == ["\n", "</think>", "\n", "\n"]
    assert chat_template.completion_prefix("thinking", C1) == ""
    assert chat_template.completion_prefix("thinking", C2) == "<think>\n"
