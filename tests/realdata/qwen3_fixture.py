"""A small Qwen3-architecture checkpoint as a real user has one, built offline.

* `tokenizer.json`: a byte-level BPE (GPT-2 pre-tokenizer regex) trained here
  on a small corpus, with Qwen3's control tokens added after the learned
  vocabulary as Qwen3 has them: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`
  (special) and `<think>`, `</think>` (added, not special).
* `tokenizer_config.json`: `eos_token` `<|im_end|>`, `pad_token`
  `<|endoftext|>` and `CHAT_TEMPLATE` (`qwen3_chat_template.jinja`: Qwen3's
  chat template, its tool-call branches left out, with `enable_thinking`).
* the weights: `transformers.Qwen3ForCausalLM` with random weights, saved with
  `save_pretrained`.
"""

from __future__ import annotations

import json
import pathlib

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]

CHAT_TEMPLATE = (pathlib.Path(__file__).parent / "qwen3_chat_template.jinja").read_text()

CORPUS = [
    "You are a helpful assistant. Compute 12 + 30. The answer is \\boxed{42}.",
    "Let me think step by step: 12 + 30 = 42, so the answer is 42.",
    "Write a function that returns the sum of a list.\ndef f(xs):\n    return sum(xs)\n",
    "Answer in lowercase, with exactly three words. Hello there friend.",
    "What is the capital of France? Paris is the capital of France.",
    "system user assistant think /think /no_think",
] * 30

SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    initializer_range=0.1,  # well-separated top-1 logits: greedy is not decided by rounding
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def byte_level_bpe(corpus, vocab_size: int, specials, think) -> tokenizers.Tokenizer:
    """A byte-level BPE laid out as Qwen3's: control tokens added after the learned vocabulary."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok.add_special_tokens(list(specials))
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in think])
    return tok


def build_tokenizer(directory: pathlib.Path) -> tokenizers.Tokenizer:
    tok = byte_level_bpe(CORPUS, 480, SPECIAL, THINK)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "model_max_length": 512,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return tok


def build(directory: pathlib.Path, seed: int = 0) -> pathlib.Path:
    """Writes the checkpoint (weights, config.json, tokenizer files) into `directory`."""
    import torch
    import transformers

    tok = build_tokenizer(directory)
    vocab = -(-tok.get_vocab_size(with_added_tokens=True) // 64) * 64
    torch.manual_seed(seed)
    config = transformers.Qwen3Config(
        vocab_size=vocab,
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        bos_token_id=None,
        rope_theta=10000.0,
        **SHAPE,
    )
    transformers.Qwen3ForCausalLM(config).eval().save_pretrained(str(directory))
    return directory


def hf_tokenizer(directory):
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(directory))


def chat_ids(hf_tok, messages, **kwargs) -> list[int]:
    """`apply_chat_template(..., tokenize=True)` as a plain id list (any transformers version)."""
    out = hf_tok.apply_chat_template(messages, tokenize=True, **kwargs)
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return list(out)
