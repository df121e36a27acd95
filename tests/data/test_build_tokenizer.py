"""The shipped tokenizer is exactly what `build_tokenizer` produces."""

import importlib.resources

from nemocascade.data import build_tokenizer, tokenizer as tokenizer_lib


def test_build_is_deterministic_and_matches_shipped_asset(tmp_path):
    first = build_tokenizer.build(str(tmp_path / "a"))
    second = build_tokenizer.build(str(tmp_path / "b"))
    with open(first, "rb") as f, open(second, "rb") as g:
        proto = f.read()
        assert proto == g.read()
    shipped = importlib.resources.files("nemocascade.data").joinpath("assets/tokenizer.model")
    assert proto == shipped.read_bytes(), (
        "assets/tokenizer.model is stale: run `python -m nemocascade.data.build_tokenizer`"
    )
    vocab = (tmp_path / "a" / "tokenizer.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == tokenizer_lib.Tokenizer.load(first).vocab_size == 1024
    assert vocab[0].split("\t")[0] == "<pad>"
    assert vocab[10].split("\t")[0] == "\\n"


def test_corpus_covers_every_domain_mode_and_style():
    sentences = build_tokenizer.corpus(examples_per_domain=2)
    assert len(sentences) == 4 * 2 * 2 * 2
    assert sum(" /think<|im_end|>" in s for s in sentences) == 8
    assert sum(" /no_think<|im_end|>" in s for s in sentences) == 8
    assert sum("<|im_start|>assistant\n<think>\n" in s for s in sentences) == 24
    assert all(s.startswith("<|im_start|>user\n") and s.endswith("<|im_end|>") for s in sentences)
