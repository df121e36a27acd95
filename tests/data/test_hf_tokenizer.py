"""Tests of the Hugging Face `tokenizer.json` backend with the ChatML chat template."""

import json
import pickle

import pytest

from nemocascade.data import chat_template, hf_tokenizer
from nemocascade.tasks import base
from tests.realdata import qwen3_fixture

# Qwen3's control tokens, in its id order after the learned vocabulary.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]
CORPUS = [
    "Compute 1 + 2. The answer is \\boxed{3}.",
    "Write a function that returns the sum of a list.\ndef f(xs):\n    return sum(xs)\n",
    "Answer in lowercase, with exactly three words.",
    "user assistant system think /think /no_think",
] * 20
EXAMPLE = base.Example(
    uid="t", domain="math", difficulty=0, prompt="Compute 1 + 2.", thinking="1+2=3", answer="3"
)


def _build(path, specials=SPECIALS, think=THINK):
    """A byte-level BPE `tokenizer.json` laid out as Qwen3's (specials added, not learned)."""
    tok = qwen3_fixture.byte_level_bpe(CORPUS, 400, specials, think)
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_tok")
    _build(d / hf_tokenizer.TOKENIZER_FILE)
    return d


@pytest.fixture(scope="module")
def tok(tok_dir):
    return hf_tokenizer.HFTokenizer.load(tok_dir)


def test_special_ids_and_pad(tok):
    base_vocab = tok.vocab_size - len(SPECIALS) - len(THINK)
    expected = {t: base_vocab + i for i, t in enumerate(SPECIALS + THINK)}
    assert tok.special_ids == expected
    assert tok.eos_id == expected["<|im_end|>"]
    assert tok.pad_id == expected["<|endoftext|>"]
    assert tok.token_id("<|im_start|>") == expected["<|im_start|>"]
    assert tok.piece(tok.eos_id) == "<|im_end|>"
    with pytest.raises(KeyError, match="not in the vocabulary"):
        tok.token_id("<|nope|>")


def test_encode_adds_nothing_and_round_trips(tok):
    text = "def f(xs):\n    return sum(xs)  # ünïcode ✓\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.encode("<|im_end|>") == [tok.eos_id]
    assert tok.encode("a<think>b") == tok.encode("a") + [tok.token_id("<think>")] + tok.encode("b")


@pytest.mark.parametrize("style", chat_template.STYLES)
@pytest.mark.parametrize("mode", ["thinking", "instruct"])
def test_chat_template_renders_unchanged(tok, style, mode):
    template = chat_template.Template(style=style)
    tokens, mask = chat_template.render_sft(tok, EXAMPLE, mode, template)
    prompt = chat_template.render_example_prompt(tok, EXAMPLE, mode, template)
    # The prompt is a token prefix of prompt + target, and the mask covers the rest.
    assert tokens[: len(prompt)] == prompt
    assert mask == [0] * len(prompt) + [1] * (len(tokens) - len(prompt))
    text = chat_template.prompt_text([{"role": "user", "content": EXAMPLE.prompt}], mode, template)
    target = chat_template.assistant_target(EXAMPLE, mode, template)
    assert tok.decode(tokens) == text + target
    assert tokens == tok.encode(text + target)
    assert prompt[:2] == [tok.token_id("<|im_start|>"), *tok.encode("user")]
    assert tokens[-1] == tok.eos_id
    parsed = chat_template.parse_completion(tok, tokens[len(prompt) :], mode, template)
    assert parsed["finished"] and parsed["answer"] == "3"
    # A c2 instruct turn carries an empty think block, a c1 one none at all.
    assert (
        parsed["thinking"] == {"thinking": "1+2=3", "instruct": "" if style == "c2" else None}[mode]
    )


def test_stop_and_think_close_ids(tok):
    assert chat_template.mode_stop_ids(tok) == (
        tok.eos_id,
        tok.token_id("<|im_start|>"),
        tok.token_id("<|endoftext|>"),
    )
    close = chat_template.think_close_ids(tok)
    assert tok.token_id("</think>") in close
    assert tok.decode(close) == chat_template.THINK_CLOSE_TEXT


def test_pickle_and_load_from_file(tok, tok_dir):
    clone = pickle.loads(pickle.dumps(tok))
    assert clone == tok and clone.special_ids == tok.special_ids
    assert clone.encode("Compute 1 + 2.") == tok.encode("Compute 1 + 2.")
    assert hf_tokenizer.HFTokenizer.load(tok_dir / hf_tokenizer.TOKENIZER_FILE) == tok


def test_pad_token_from_tokenizer_config(tmp_path):
    _build(tmp_path / hf_tokenizer.TOKENIZER_FILE)
    (tmp_path / hf_tokenizer.TOKENIZER_CONFIG_FILE).write_text(
        json.dumps({"pad_token": {"content": "<|im_start|>"}})
    )
    tok = hf_tokenizer.HFTokenizer.load(tmp_path)
    assert tok.pad_id == tok.token_id("<|im_start|>")
    assert hf_tokenizer.HFTokenizer.load(tmp_path, pad_token="<|im_end|>").pad_id == tok.eos_id


def test_missing_tokens_fail_clearly(tmp_path):
    _build(tmp_path / "no_chatml.json", specials=["<|endoftext|>"])
    with pytest.raises(ValueError, match=r"lacks the end-of-turn token '<\|im_end\|>'"):
        hf_tokenizer.HFTokenizer.load(tmp_path / "no_chatml.json")
    _build(tmp_path / "no_pad.json", specials=["<|im_start|>", "<|im_end|>"])
    with pytest.raises(ValueError, match="no pad token"):
        hf_tokenizer.HFTokenizer.load(tmp_path / "no_pad.json")
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        hf_tokenizer.HFTokenizer.load(tmp_path / "empty")
