"""The tokenizer and chat template of a run or a checkpoint, and the checks they must pass.

Library functions, free of the config (the stages call them through
`trainer/stage_setup.text_for`; `generate`, `evaluate` and `serve` through
`load`). The settings, as the config's `data` section names them:

`data.tokenizer`:
  ""        the tokenizer of the `init.init_from` checkpoint (`convert` copies
            it beside the params, every stage copies it into its directory);
            the built-in task-world tokenizer when the checkpoint has none;
  "builtin" the task world's SentencePiece model;
  a path    a directory holding `tokenizer.json` (+ `tokenizer_config.json`),
            or the `tokenizer.json` file (any `etils.epath` path).

`data.chat_template`:
  ""        the tokenizer's own Jinja template (`tokenizer_config.json` /
            `chat_template.jinja`); the built-in layout for the built-in
            tokenizer;
  "builtin" the built-in ChatML layouts (`data.template_style` c1 / c2);
  a path    a `.jinja` file.

Fail closed: a checkpoint (or the stage's own directory, on a rerun) that
carries a different tokenizer, a vocabulary larger than the embedding, a
thinking mode without `<think>` / `</think>` tokens, a template without a
generation prompt: each is a `TextError` naming the settings, raised before
anything compiles.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
from etils import epath

from nemocascade.data import chat_template, hf_tokenizer, jinja_template, tokenizer as tokenizer_lib

BUILTIN = "builtin"
FILES = (
    hf_tokenizer.TOKENIZER_FILE,
    hf_tokenizer.TOKENIZER_CONFIG_FILE,
    hf_tokenizer.CHAT_TEMPLATE_FILE,
)
THINK_TOKENS = (tokenizer_lib.THINK_OPEN, tokenizer_lib.THINK_CLOSE)


class TextError(ValueError):
    """The tokenizer or template cannot serve this run; the message names the setting."""


class Text(NamedTuple):
    """A tokenizer, its chat template and where the tokenizer came from."""

    tok: tokenizer_lib.Tokenizer | hf_tokenizer.HFTokenizer
    template: chat_template.AnyTemplate
    source: str  # "builtin" or the directory of tokenizer.json


def tokenizer_dir(path: str) -> epath.Path | None:
    """The directory with `tokenizer.json` that belongs to a checkpoint path.

    `path` is a stage/converted directory, its `export`, or a tokenizer dir.
    """
    if not path:
        return None
    p = epath.Path(path)
    for d in (p, p.parent):
        if (d / hf_tokenizer.TOKENIZER_FILE).exists():
            return d
    return None


def load_tokenizer(spec: str, init_from: str = "", checkpoint_field="config.init.init_from"):
    """(tokenizer, source) for a `data.tokenizer` value (see the module docstring).

    An explicit tokenizer must be the one the checkpoint at `init_from` carries.
    """
    stored = tokenizer_dir(init_from)
    if spec == BUILTIN or (not spec and stored is None):
        tok, source = tokenizer_lib.Tokenizer.load(), BUILTIN
    else:
        path = epath.Path(spec) if spec else stored
        field = f"config.data.tokenizer={spec!r}" if spec else f"{checkpoint_field}={init_from!r}"
        try:
            directory = path if path.is_dir() else path.parent
            tok, source = hf_tokenizer.HFTokenizer.load(path), str(directory)
        except (FileNotFoundError, ValueError) as e:
            raise TextError(f"{field}: {e}") from None
    if spec:
        check_same(tok, init_from, checkpoint_field, f"config.data.tokenizer={spec!r}")
    return tok, source


def load_template(
    spec: str, source: str, *, tok, style: str = "c1", mode_switch: str = "enable_thinking"
) -> chat_template.AnyTemplate:
    """The chat template for a `data.chat_template` value."""
    if spec == BUILTIN or (not spec and source == BUILTIN):
        return chat_template.Template(style=style)
    if spec:
        path, origin = epath.Path(spec), f"config.data.chat_template={spec!r}"
        if not path.exists():
            raise TextError(f"{origin}: no such file")
        text = path.read_text()
    else:
        origin = f"of the tokenizer at {source}"
        text = hf_tokenizer.chat_template_source(source)
        if text is None:
            raise TextError(
                f"the tokenizer at {source} has no chat_template (tokenizer_config.json or "
                f"chat_template.jinja): set config.data.chat_template to a .jinja file or 'builtin'"
            )
    try:
        return jinja_template.JinjaTemplate(
            source=text,
            eos_token=tok.piece(tok.eos_id),
            bos_token=getattr(tok, "bos_token", ""),
            mode_switch=mode_switch,
            origin=origin,
        )
    except ValueError as e:
        raise TextError(f"config.data.chat_template: {e}") from None


def load(
    checkpoint_dir: str,
    model,
    modes,
    *,
    tokenizer: str = "",
    chat_template: str = "",
    style: str = "c1",
    mode_switch: str = "enable_thinking",
) -> Text:
    """The tokenizer and template for serving `checkpoint_dir` in `modes`, checked against
    the model (what `generate`, `evaluate` and `serve` load; flags as in `data.*`)."""
    tok, source = load_tokenizer(tokenizer, checkpoint_dir)
    template = load_template(chat_template, source, tok=tok, style=style, mode_switch=mode_switch)
    check_model(tok, model, tuple(modes))
    return Text(tok, template, source)


def check_same(tok, other_dir: str, what: str, field: str) -> None:
    """Fails unless the tokenizer stored at `other_dir` (if any) is `tok`'s."""
    d = tokenizer_dir(other_dir)
    if d is None:
        return
    stored = hf_tokenizer.HFTokenizer.load(d)
    if stored.tokenizer_json != getattr(tok, "tokenizer_json", None):
        theirs = (
            f"the task world's {tok.vocab_size}-piece SentencePiece model"
            if tok.name == BUILTIN
            else tok.name
        )
        raise TextError(
            f"{what}={other_dir} carries the tokenizer {stored.name} (at {d}), but "
            f"{field} gives {theirs}: token ids would index unrelated embedding rows. "
            "Leave config.data.tokenizer empty to use the checkpoint's, or point it at the same "
            "tokenizer.json"
        )


def check_model(tok, model, modes) -> None:
    """Vocabulary fits the embedding; the thinking mode has its tokens."""
    if tok.vocab_size > model.vocab_size:
        raise TextError(
            f"config.model.vocab_size={model.vocab_size} is smaller than the tokenizer's "
            f"vocabulary ({tok.vocab_size} ids, {tok.name})"
        )
    if "thinking" in modes:
        missing = []
        for t in THINK_TOKENS:
            try:
                tok.token_id(t)
            except KeyError:
                missing.append(t)
        if missing:
            raise TextError(
                f"the thinking mode needs the tokens {missing}, which the tokenizer "
                f"({tok.name}) lacks; use instruct mode only (config.data.modes / "
                f"config.rl.mode / config.eval.modes) or a tokenizer with them"
            )


def save(source: str, stage_dir: str, template=None) -> None:
    """Copies the tokenizer files into `stage_dir` (process 0), so the stage is self-contained."""
    if jax.process_index() != 0:
        return
    src, dst = epath.Path(source), epath.Path(stage_dir)
    dst.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (src / name).exists() and src != dst:
            (dst / name).write_bytes((src / name).read_bytes())
    if isinstance(template, jinja_template.JinjaTemplate) and template.origin.startswith("config."):
        (dst / hf_tokenizer.CHAT_TEMPLATE_FILE).write_text(template.source)
