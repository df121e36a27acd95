"""Decoding modes are data: same fields, different values."""

import pytest

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.rollout import modes


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


def test_thinking_and_instruct_differ_only_in_values(tok):
    think = modes.get("thinking", tok, thinking_budget=100, answer_budget=20)
    inst = modes.get("instruct", tok, thinking_budget=100, answer_budget=20)
    assert (think.thinking_budget, think.answer_budget) == (100, 20)
    assert (inst.thinking_budget, inst.answer_budget) == (None, None)
    assert think.stop_ids == inst.stop_ids == (tok.eos_id, tok.token_id("<|im_start|>"))
    assert think.think_close_ids == tuple(chat_template.think_close_ids(tok))
    assert think.think_end_id == tok.token_id("</think>")
    ids = tok.encode("<think>\nx\n</think>\n\n42<|im_end|>")
    assert think.parser(ids)["answer"] == "42" and think.parser(ids)["thinking"] == "x"
    messages = [{"role": "user", "content": "hi"}]
    assert tok.decode(think.prompt(tok, messages)).endswith(
        "hi /think<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "/no_think" in tok.decode(inst.prompt(tok, messages))


def test_c2_parser_restores_the_opener(tok):
    mode = modes.get("thinking", tok, chat_template.Template(style="c2"))
    parsed = mode.parser(tok.encode("steps\n</think>\n\n7<|im_end|>"))
    assert (parsed["thinking"], parsed["answer"], parsed["finished"]) == ("steps", "7", True)


def test_sampler_kwargs_are_per_row(tok):
    rows = [modes.get("thinking", tok, thinking_budget=8), modes.get("instruct", tok)]
    kw = modes.sampler_kwargs(rows)
    assert kw["thinking_budget"] == [8, None] and kw["answer_budget"] == [None, None]
    assert kw["think_end_id"] == tok.token_id("</think>")


def test_bad_mode_or_budget_raises(tok):
    with pytest.raises(ValueError, match="mode must be one of"):
        modes.get("fast", tok)
    with pytest.raises(ValueError, match="thinking_budget"):
        modes.get("thinking", tok, thinking_budget=-1)
