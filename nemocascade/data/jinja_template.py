"""A model's own chat template: the Jinja `chat_template` of its `tokenizer_config.json`.

Rendered as `transformers.apply_chat_template` renders it (sandboxed Jinja,
`trim_blocks` / `lstrip_blocks`, a `tojson` that keeps non-ASCII text,
`raise_exception`, `strftime_now`, `{% generation %}` blocks), so the ids a
run trains and samples on are the ids the model saw in pre- and post-training.

The decoding mode is passed to the template by one of two documented
conventions (`mode_switch`):

* `enable_thinking` (default, Qwen3): the template variable
  `enable_thinking` is true in thinking mode and false in instruct mode;
  Qwen3's template then ends an instruct generation prompt with an empty
  think block `<think>\\n\\n</think>\\n\\n` — the same convention as Cascade 2's
  non-thinking mode.
* `soft_switch` (Cascade 1, Qwen3's `/think` `/no_think`): the flag is
  appended to every user turn and the template renders as it is.

The template object is plain data (picklable, hashable); the compiled Jinja
template is cached per source text.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from collections.abc import Sequence

import jinja2
import jinja2.ext
import jinja2.sandbox

MODE_SWITCHES = ("enable_thinking", "soft_switch")
_SOFT_FLAGS = {"thinking": "/think", "instruct": "/no_think"}
THINK_OPEN = "<think>"


class _Generation(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` (transformers' assistant marker): its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_Generation, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


def _check_mode(mode: str) -> None:
    if mode not in _SOFT_FLAGS:
        raise ValueError(f"mode must be one of {tuple(_SOFT_FLAGS)}, got {mode!r}")


@dataclasses.dataclass(frozen=True)
class JinjaTemplate:
    """A Jinja chat template with the model's special tokens.

    Attributes:
      source: the Jinja text.
      eos_token: the text of the token that ends an assistant turn.
      bos_token: passed to the template as `bos_token` (Llama templates use it).
      mode_switch: "enable_thinking" or "soft_switch" (module docstring).
      system: system message prepended when the conversation has none.
      origin: where the template came from (for messages and logs).
    """

    source: str
    eos_token: str
    bos_token: str = ""
    mode_switch: str = "enable_thinking"
    system: str | None = None
    origin: str = ""

    def __post_init__(self):
        if self.mode_switch not in MODE_SWITCHES:
            raise ValueError(
                f"data.mode_switch must be one of {MODE_SWITCHES}, got {self.mode_switch!r}"
            )
        try:
            _compile(self.source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ValueError(f"chat template {self.origin}: line {e.lineno}: {e.message}") from None
        probe = [{"role": "user", "content": "x"}]
        if self.render(probe, add_generation_prompt=True, mode="thinking") == self.render(
            probe, add_generation_prompt=False, mode="thinking"
        ):
            raise ValueError(
                f"chat template {self.origin} renders no generation prompt "
                "(add_generation_prompt changes nothing)"
            )

    def _messages(self, messages: Sequence[dict], mode: str) -> list[dict]:
        out = [dict(m) for m in messages]
        if self.system is not None and (not out or out[0]["role"] != "system"):
            out.insert(0, {"role": "system", "content": self.system})
        if self.mode_switch == "soft_switch":
            for m in out:
                if m["role"] == "user":
                    m["content"] = f"{m['content']} {_SOFT_FLAGS[mode]}"
        return out

    def render(self, messages: Sequence[dict], *, add_generation_prompt: bool, mode: str) -> str:
        """The conversation as text, exactly as `apply_chat_template(tokenize=False)` gives it."""
        _check_mode(mode)
        kwargs = {}
        if self.mode_switch == "enable_thinking":
            kwargs["enable_thinking"] = mode == "thinking"
        try:
            return _compile(self.source).render(
                messages=self._messages(messages, mode),
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                tools=None,
                **kwargs,
            )
        except jinja2.exceptions.TemplateError as e:
            raise ValueError(f"chat template {self.origin}: {e}") from None

    def prompt_text(self, messages: Sequence[dict], mode: str) -> str:
        """The conversation with the generation prompt (the model continues from here)."""
        return self.render(messages, add_generation_prompt=True, mode=mode)

    def conversation_text(self, messages: Sequence[dict], mode: str) -> str:
        """A whole conversation (ending with an assistant turn), as trained on."""
        return self.render(messages, add_generation_prompt=False, mode=mode)

    @functools.cached_property
    def _prefixes(self) -> dict[str, str]:
        out = {}
        probe = [{"role": "user", "content": "x"}]
        for mode in _SOFT_FLAGS:
            without = self.render(probe, add_generation_prompt=False, mode=mode)
            suffix = self.prompt_text(probe, mode)[len(without) :]
            i = suffix.find(THINK_OPEN)
            out[mode] = suffix[i:] if i >= 0 else ""
        return out

    def completion_prefix(self, mode: str) -> str:
        """The part of the assistant turn that the generation prompt already holds.

        Qwen3 with `enable_thinking=False`: `<think>\\n\\n</think>\\n\\n`; else "".
        """
        _check_mode(mode)
        return self._prefixes[mode]

    def __getstate__(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)
