"""Tests of the shipped SentencePiece tokenizer."""

import io
import pickle

import pytest
import sentencepiece as spm

from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.tasks import base, registry


@pytest.fixture(scope="module")
def tok():
    return tokenizer_lib.Tokenizer.load()


def test_shipped_model_shape(tok):
    assert tok.vocab_size == 1024
    assert tok.pad_id == 0
    assert tok.piece(0) == "<pad>"
    assert tok.eos_id == tok.token_id("<|im_end|>") == 5
    assert tok.special_ids == {
        "<pad>": 0,
        "<unk>": 1,
        "<s>": 2,
        "</s>": 3,
        "<|im_start|>": 4,
        "<|im_end|>": 5,
        "<think>": 6,
        "</think>": 7,
        "/think": 8,
        "/no_think": 9,
    }


@pytest.mark.parametrize("piece", tokenizer_lib.USER_DEFINED_SYMBOLS)
def test_control_tokens_encode_atomically(tok, piece):
    assert tok.encode(piece) == [tok.token_id(piece)]
    ids = tok.encode(f"ab{piece}cd")
    assert ids == tok.encode("ab") + [tok.token_id(piece)] + tok.encode("cd")


def test_flags_do_not_swallow_each_other(tok):
    assert tok.pieces(tok.encode("x /no_think</think>/think")) == [
        "x",
        "▁",
        "/no_think",
        "</think>",
        "/think",
    ]


def test_digits_are_single_tokens(tok):
    ids = tok.encode("9876543210")
    assert tok.pieces(ids) == list("9876543210")


def test_role_names_are_single_pieces(tok):
    assert tok.pieces(tok.encode("user")) == ["user"]
    assert tok.pieces(tok.encode("assistant")) == ["assistant"]


def test_token_id_names_missing_piece(tok):
    with pytest.raises(KeyError, match="no-such-piece"):
        tok.token_id("no-such-piece")


@pytest.mark.parametrize("domain", base.DOMAINS)
def test_round_trip_on_task_world(tok, domain):
    for split in base.SPLITS:
        for example in registry.generate(domain, split, 20, seed=3):
            for text in (example.prompt, example.thinking, example.answer):
                assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "def f(x):\n    if x:\n        return [x, 1]\n    return 0\n",
        "  leading and trailing  ",
        "\n\n\nblank lines\n\n",
        "tab\there\r\nand crlf",
        "naïve café, 東京, emoji 🙂",
        "",
    ],
)
def test_round_trip_whitespace_and_bytes(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.token_id("<unk>") not in ids


def test_pickle_round_trip(tok):
    clone = pickle.loads(pickle.dumps(tok))
    assert clone == tok
    text = "Compute 12 + 34. /think"
    assert clone.encode(text) == tok.encode(text)
    assert clone.special_ids == tok.special_ids


def test_load_from_path(tok, tmp_path):
    path = tmp_path / "t.model"
    path.write_bytes(tok.model_proto)
    assert tokenizer_lib.Tokenizer.load(path) == tok


def test_rejects_model_without_special_tokens():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["plain text only"] * 50),
        model_writer=model,
        vocab_size=20,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    with pytest.raises(ValueError, match="special pieces"):
        tokenizer_lib.Tokenizer(model.getvalue())
