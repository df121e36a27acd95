"""Trains the shipped SentencePiece model of the built-in task world.

    python -m nemocascade.data.build_tokenizer [--vocab_size=1024] [--output_dir=...]

The corpus is every SFT example of every domain, rendered in both modes with
both template styles, in generation order. Training is single-threaded with
the whole corpus in a fixed order, so the same task world always yields the
same bytes (a test checks this); it takes a few seconds.

Design choices, all for a tiny model on arithmetic and code:
  * BPE with `split_digits`: every digit is its own token.
  * identity normalization, no dummy prefix, no whitespace collapsing, and
    the newline as a user-defined symbol: text round-trips exactly.
  * byte fallback: no input is ever out of vocabulary.
  * the chat control tokens are user-defined symbols: always one id each.
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Iterable

import sentencepiece as spm

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.tasks import base, registry

VOCAB_SIZE = 1024
EXAMPLES_PER_DOMAIN = 400
SEED = 0
# The shipped model predates the swe domain, whose text it byte-encodes
# (docs/task_world.md); adding a domain here retrains every token id.
TOKENIZER_DOMAINS = ("math", "code", "if", "chat")


def train_model(sentences: Iterable[str], vocab_size: int = VOCAB_SIZE) -> bytes:
    """Trains a BPE model on `sentences` (in the given order); returns its proto."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=1.0,
        split_digits=True,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        split_by_whitespace=True,
        user_defined_symbols=list(tokenizer_lib.USER_DEFINED_SYMBOLS),
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece=tokenizer_lib.PAD,
        unk_piece=tokenizer_lib.UNK,
        bos_piece=tokenizer_lib.BOS,
        eos_piece=tokenizer_lib.EOS,
        # Determinism: one thread, the whole corpus, no sampling or shuffling.
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=1 << 20,
        minloglevel=2,
    )
    return model.getvalue()


def corpus(examples_per_domain: int = EXAMPLES_PER_DOMAIN, seed: int = SEED) -> list[str]:
    """Rendered SFT conversations of every domain, both modes, both styles."""
    sentences = []
    for domain in TOKENIZER_DOMAINS:
        for example in registry.generate(domain, "sft", examples_per_domain, seed=seed):
            for style in chat_template.STYLES:
                template = chat_template.Template(style=style)
                for mode in base.MODES:
                    messages = [{"role": "user", "content": example.prompt}]
                    sentences.append(
                        chat_template.prompt_text(messages, mode, template)
                        + chat_template.assistant_target(example, mode, template)
                    )
    return sentences


def vocab_text(model_proto: bytes) -> str:
    """One `piece<TAB>score` line per id, as `spm_train` writes `.vocab` files."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    lines = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i).replace("\n", "\\n")
        lines.append(f"{piece}\t{sp.get_score(i):g}")
    return "\n".join(lines) + "\n"


def build(
    output_dir: str,
    vocab_size: int = VOCAB_SIZE,
    examples_per_domain: int = EXAMPLES_PER_DOMAIN,
) -> str:
    """Writes `tokenizer.model` and `tokenizer.vocab` into `output_dir`."""
    proto = train_model(corpus(examples_per_domain), vocab_size)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(proto)
    with open(os.path.join(output_dir, "tokenizer.vocab"), "w", encoding="utf-8") as f:
        f.write(vocab_text(proto))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=os.path.join(os.path.dirname(__file__), "assets"))
    parser.add_argument("--vocab_size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--examples_per_domain", type=int, default=EXAMPLES_PER_DOMAIN)
    args = parser.parse_args(argv)
    path = build(args.output_dir, args.vocab_size, args.examples_per_domain)
    print(f"wrote {path} (vocab {tokenizer_lib.Tokenizer.load(path).vocab_size})")


if __name__ == "__main__":
    main()
