"""Hugging Face `tokenizer.json` backend behind the interface of `tokenizer.Tokenizer`.

Real Qwen3/Llama checkpoints ship a `tokenizers` JSON file; `HFTokenizer`
wraps it so the chat template, pipelines and sampler use it unchanged:
`encode` adds no BOS/EOS (the ChatML template spells out every control token)
and `decode` keeps special tokens (the think-block parser needs `<think>`).

Required: `<|im_start|>` and `<|im_end|>` (the end of an assistant turn, hence
`eos_id`) are single tokens. `<think>` / `</think>` are needed only by the
thinking mode, as in Qwen3. The pad token is, in order: the `pad_token`
argument, `tokenizer_config.json`'s `pad_token` beside the file, the padding
token of `tokenizer.json`, then `<|endoftext|>` or `<pad>` if present.
"""

from __future__ import annotations

import json
import os

import tokenizers

from nemocascade.data import tokenizer as tokenizer_lib

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
_REQUIRED = (tokenizer_lib.IM_START, tokenizer_lib.IM_END)
_PAD_FALLBACKS = ("<|endoftext|>", tokenizer_lib.PAD)


def _config_pad_token(directory: str) -> str | None:
    path = os.path.join(directory, TOKENIZER_CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        pad = json.load(f).get("pad_token")
    return pad.get("content") if isinstance(pad, dict) else pad


class HFTokenizer:
    """A `tokenizers.Tokenizer` with the chat-template special tokens.

    Picklable (grain workers): the state is the tokenizer JSON and the pad token.
    """

    def __init__(self, tokenizer_json: str, pad_token: str | None = None):
        self._json = tokenizer_json
        self._tok = tokenizers.Tokenizer.from_str(tokenizer_json)
        missing = [t for t in _REQUIRED if self._tok.token_to_id(t) is None]
        if missing:
            raise ValueError(f"{TOKENIZER_FILE} lacks the chat-template token(s) {missing}")
        if pad_token is None:
            padding = self._tok.padding
            candidates = ([padding["pad_token"]] if padding else []) + list(_PAD_FALLBACKS)
            pad_token = next((t for t in candidates if self._tok.token_to_id(t) is not None), None)
            if pad_token is None:
                raise ValueError(
                    f"no pad token: pass pad_token=, or set pad_token in {TOKENIZER_CONFIG_FILE}"
                )
        if self._tok.token_to_id(pad_token) is None:
            raise ValueError(f"pad token {pad_token!r} is not in the vocabulary")
        self._pad_token = pad_token
        # Added tokens are the control tokens (Qwen3 marks `<think>` non-special,
        # yet it is one as much as `<|im_end|>`).
        self.special_ids = {t.content: i for i, t in self._tok.get_added_tokens_decoder().items()}
        for t in _REQUIRED + (pad_token,):
            self.special_ids.setdefault(t, self._tok.token_to_id(t))

    @classmethod
    def load(cls, path: str | os.PathLike, pad_token: str | None = None) -> HFTokenizer:
        """Loads `path` (a `tokenizer.json`, or a directory holding one)."""
        path = os.fspath(path)
        directory, file = (path, os.path.join(path, TOKENIZER_FILE))
        if not os.path.isdir(path):
            directory, file = os.path.dirname(path), path
        if not os.path.exists(file):
            raise FileNotFoundError(f"no {TOKENIZER_FILE} at {path!r}")
        with open(file, encoding="utf-8") as f:
            text = f.read()
        return cls(text, pad_token or _config_pad_token(directory))

    @property
    def tokenizer_json(self) -> str:
        return self._json

    @property
    def vocab_size(self) -> int:
        """Ids in use (added tokens included); a model's embedding may have more rows."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        return self.special_ids[self._pad_token]

    @property
    def eos_id(self) -> int:
        """End of an assistant turn: generation stops here."""
        return self.special_ids[tokenizer_lib.IM_END]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_id(self, piece: str) -> int:
        i = self._tok.token_to_id(piece)
        if i is None:
            raise KeyError(f"piece {piece!r} is not in the vocabulary")
        return i

    def piece(self, token_id: int) -> str:
        piece = self._tok.id_to_token(int(token_id))
        if piece is None:
            raise KeyError(f"id {token_id} is not in the vocabulary")
        return piece

    def pieces(self, ids) -> list[str]:
        return [self.piece(i) for i in ids]

    def __getstate__(self):
        return {"tokenizer_json": self._json, "pad_token": self._pad_token}

    def __setstate__(self, state):
        self.__init__(state["tokenizer_json"], state["pad_token"])

    def __eq__(self, other):
        return (
            isinstance(other, HFTokenizer)
            and self._json == other._json
            and self._pad_token == other._pad_token
        )

    def __hash__(self):
        return hash((self._json, self._pad_token))
