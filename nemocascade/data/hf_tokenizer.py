"""Hugging Face `tokenizer.json` backend behind the interface of `tokenizer.Tokenizer`.

Real Qwen3/Llama checkpoints ship a `tokenizers` JSON file; `HFTokenizer`
wraps it so the chat template, pipelines and sampler use it unchanged:
`encode` adds no BOS/EOS (the ChatML template spells out every control token)
and `decode` keeps special tokens (the think-block parser needs `<think>`).

Required: the end-of-turn token (`tokenizer_config.json`'s `eos_token`,
else `<|im_end|>`) is a single token; it is `eos_id`, where generation stops.
`<think>` / `</think>` are needed only by the thinking mode, as in Qwen3
(checked by `data.text`). The pad token is, in order: the `pad_token`
argument, `tokenizer_config.json`'s `pad_token` beside the file, the padding
token of `tokenizer.json`, then `<|endoftext|>` or `<pad>` if present.

`tokenizer_config.json` also carries the model's Jinja `chat_template` (or a
`chat_template.jinja` file beside it, as newer `transformers` save it), read
by `chat_template_source`.
"""

from __future__ import annotations

import hashlib
import json

import tokenizers
from etils import epath

from nemocascade.data import tokenizer as tokenizer_lib

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
_PAD_FALLBACKS = ("<|endoftext|>", tokenizer_lib.PAD)
# Also final where present: the model opened a new turn, or ended the document.
_EXTRA_STOPS = (tokenizer_lib.IM_START, "<|endoftext|>")


def read_config(directory) -> dict:
    """`tokenizer_config.json` beside the tokenizer ({} when absent)."""
    path = epath.Path(directory) / TOKENIZER_CONFIG_FILE
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def chat_template_source(directory: str) -> str | None:
    """The model's Jinja chat template: `chat_template.jinja`, else `tokenizer_config.json`'s.

    A list of named templates (as some configs hold) yields the one named "default".
    """
    path = epath.Path(directory) / CHAT_TEMPLATE_FILE
    if path.exists():
        return path.read_text(encoding="utf-8")
    source = read_config(directory).get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    return source if isinstance(source, str) else None


class HFTokenizer:
    """A `tokenizers.Tokenizer` with the chat-template special tokens.

    Picklable (grain workers): the state is the tokenizer JSON and the pad token.
    """

    def __init__(
        self,
        tokenizer_json: str,
        pad_token: str | None = None,
        eos_token: str | None = None,
        bos_token: str | None = None,
    ):
        self._json = tokenizer_json
        self._tok = tokenizers.Tokenizer.from_str(tokenizer_json)
        eos_token = eos_token or tokenizer_lib.IM_END
        if self._tok.token_to_id(eos_token) is None:
            raise ValueError(
                f"{TOKENIZER_FILE} lacks the end-of-turn token {eos_token!r} "
                f"(eos_token of {TOKENIZER_CONFIG_FILE}, default {tokenizer_lib.IM_END!r})"
            )
        self._eos_token, self.bos_token = eos_token, bos_token or ""
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
        for t in (eos_token, pad_token):
            self.special_ids.setdefault(t, self._tok.token_to_id(t))

    @classmethod
    def load(cls, path, pad_token: str | None = None) -> HFTokenizer:
        """Loads `path` (a `tokenizer.json`, or a directory holding one; any epath)."""
        path = epath.Path(path)
        directory, file = (path, path / TOKENIZER_FILE)
        if not path.is_dir():
            directory, file = path.parent, path
        if not file.exists():
            raise FileNotFoundError(f"no {TOKENIZER_FILE} at {str(path)!r}")
        text = file.read_text(encoding="utf-8")
        config = read_config(directory)
        return cls(
            text,
            pad_token or _token_text(config.get("pad_token")),
            eos_token=_token_text(config.get("eos_token")),
            bos_token=_token_text(config.get("bos_token")),
        )

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
        return self.special_ids[self._eos_token]

    @property
    def eos_token(self) -> str:
        return self._eos_token

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """`eos_id`, then `<|im_start|>` and `<|endoftext|>` where the vocabulary has them."""
        extra = [self._tok.token_to_id(t) for t in _EXTRA_STOPS]
        return tuple(dict.fromkeys([self.eos_id] + [i for i in extra if i is not None]))

    @property
    def name(self) -> str:
        """A short fingerprint of the vocabulary, for messages that compare tokenizers."""
        return f"tokenizer.json sha256:{hashlib.sha256(self._json.encode()).hexdigest()[:12]}"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each token's (start, end) character offsets in `text`."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, [tuple(o) for o in enc.offsets]

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
        return {
            "tokenizer_json": self._json,
            "pad_token": self._pad_token,
            "eos_token": self._eos_token,
            "bos_token": self.bos_token,
        }

    def __setstate__(self, state):
        self.__init__(**state)

    def __eq__(self, other):
        return (
            isinstance(other, HFTokenizer)
            and self._json == other._json
            and self._pad_token == other._pad_token
            and self._eos_token == other._eos_token
        )

    def __hash__(self):
        return hash((self._json, self._pad_token, self._eos_token))
