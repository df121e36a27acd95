"""Dual-mode ChatML chat template (Qwen3 layout).

One template serves both decoding modes; the mode is data, never a second code
path. Two styles:

* Cascade 1 (`style="c1"`, default): the flag ` /think` or ` /no_think` is
  appended to every user turn; the thinking answer opens its own think block::

    <|im_start|>user\\n{prompt} /think<|im_end|>\\n<|im_start|>assistant\\n
    <think>\\n{thinking}\\n</think>\\n\\n{answer}<|im_end|>

    <|im_start|>user\\n{prompt} /no_think<|im_end|>\\n<|im_start|>assistant\\n
    {answer}<|im_end|>

* Cascade 2 (`style="c2"`): no flags; the prompt itself ends with the opener
  of the assistant turn, `<think>\\n` (thinking) or `<think>\\n\\n</think>\\n\\n`
  (instruct), and the model continues from there.

Every prompt ends right after a newline, which is a user-defined symbol of the
tokenizer, so `encode(prompt) + encode(target) == encode(prompt + target)`:
what the sampler is fed is token for token what SFT trained on.

Completions are parsed with `split_thinking`, the one parser of think blocks
(defined in `nemocascade.rewards.base`, re-exported here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.rewards.base import split_thinking
from nemocascade.tasks import base

__all__ = [
    "Template",
    "assistant_target",
    "completion_prefix",
    "mode_stop_ids",
    "parse_completion",
    "prompt_text",
    "render_completion_text",
    "render_example_prompt",
    "render_prompt",
    "render_rm_input",
    "render_sft",
    "split_thinking",
    "think_close_ids",
]

STYLES = ("c1", "c2")
ROLES = ("system", "user", "assistant")

IM_START = tokenizer_lib.IM_START
IM_END = tokenizer_lib.IM_END
_MODE_FLAGS = {"thinking": tokenizer_lib.THINK_FLAG, "instruct": tokenizer_lib.NO_THINK_FLAG}
# Appended by the sampler when the thinking budget runs out, so the model answers.
THINK_CLOSE_TEXT = "\n</think>\n\n"
_C2_OPENERS = {"thinking": "<think>\n", "instruct": "<think>\n\n</think>\n\n"}


@dataclasses.dataclass(frozen=True)
class Template:
    """Chat template options.

    Attributes:
      style: "c1" (mode flag on user turns) or "c2" (mode in the assistant opener).
      system: system message prepended when the conversation has none.
    """

    style: str = "c1"
    system: str | None = None

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"Template.style must be one of {STYLES}, got {self.style!r}")


DEFAULT = Template()


def _check_mode(mode: str) -> None:
    if mode not in base.MODES:
        raise ValueError(f"mode must be one of {base.MODES}, got {mode!r}")


def _turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def completion_prefix(mode: str, template: Template = DEFAULT) -> str:
    """Text of the assistant turn that the prompt already contains (c2 opener)."""
    _check_mode(mode)
    return _C2_OPENERS[mode] if template.style == "c2" else ""


def prompt_text(messages: Sequence[dict], mode: str, template: Template = DEFAULT) -> str:
    """The conversation up to and including the assistant header (and c2 opener).

    Earlier assistant turns are rendered as given (pass answers only: thinking
    is not kept in the history, as in Qwen3).
    """
    _check_mode(mode)
    if not messages or messages[-1]["role"] != "user":
        raise ValueError("the conversation must end with a user message")
    parts = []
    if template.system is not None and messages[0]["role"] != "system":
        parts.append(_turn("system", template.system))
    for message in messages:
        role, content = message["role"], message["content"]
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
        if role == "user" and template.style == "c1":
            content = f"{content} {_MODE_FLAGS[mode]}"
        parts.append(_turn(role, content))
    parts.append(f"{IM_START}assistant\n")
    parts.append(completion_prefix(mode, template))
    return "".join(parts)


def render_completion_text(
    thinking: str | None, answer: str, mode: str, template: Template = DEFAULT
) -> str:
    """What the model should generate after the prompt, closing `<|im_end|>` included."""
    _check_mode(mode)
    if mode == "instruct":
        return f"{answer}{IM_END}"
    body = f"{thinking or ''}{THINK_CLOSE_TEXT}{answer}{IM_END}"
    return body if template.style == "c2" else f"<think>\n{body}"


def assistant_target(example: base.Example, mode: str, template: Template = DEFAULT) -> str:
    """SFT target text of `example` in `mode`."""
    return render_completion_text(example.thinking, example.answer, mode, template)


def _example_messages(example: base.Example) -> list[dict]:
    return [{"role": "user", "content": example.prompt}]


def render_prompt(
    tok: tokenizer_lib.Tokenizer,
    messages: Sequence[dict],
    mode: str,
    template: Template = DEFAULT,
) -> list[int]:
    """Prompt token ids, ready for the sampler."""
    return tok.encode(prompt_text(messages, mode, template))


def render_example_prompt(
    tok: tokenizer_lib.Tokenizer, example: base.Example, mode: str, template: Template = DEFAULT
) -> list[int]:
    return render_prompt(tok, _example_messages(example), mode, template)


def render_sft(
    tok: tokenizer_lib.Tokenizer, example: base.Example, mode: str, template: Template = DEFAULT
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + target and a loss mask that is 1 exactly on the target."""
    prompt = render_example_prompt(tok, example, mode, template)
    target = tok.encode(assistant_target(example, mode, template))
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def render_rm_input(
    tok: tokenizer_lib.Tokenizer, prompt: str, answer: str, template: Template = DEFAULT
) -> list[int]:
    """Reward-model input: the request and the final answer only (no think block).

    The same layout serves RM training pairs and RLHF scoring; the sequence ends
    with `<|im_end|>`, whose position is where the RM reads its score.
    """
    ids = render_prompt(tok, [{"role": "user", "content": prompt}], "instruct", template)
    return ids + tok.encode(render_completion_text(None, answer, "instruct", template))


def mode_stop_ids(tok: tokenizer_lib.Tokenizer) -> tuple[int, ...]:
    """Tokens that end generation in either mode.

    `<|im_end|>` closes the turn; `<|im_start|>` means the model started a new
    turn without closing its own, which is just as final (and unfinished).
    """
    return (tok.eos_id, tok.token_id(IM_START))


def think_close_ids(tok: tokenizer_lib.Tokenizer) -> list[int]:
    """Tokens the sampler forces when the thinking budget is reached."""
    return tok.encode(THINK_CLOSE_TEXT)


def parse_completion(
    tok: tokenizer_lib.Tokenizer,
    ids: Sequence[int],
    mode: str = "thinking",
    template: Template = DEFAULT,
) -> dict:
    """Splits generated ids into the assistant turn's parts.

    Returns a dict with
      completion: the whole assistant turn text (c2 opener included) up to the
        first stop token, which is excluded;
      thinking, answer: `split_thinking(completion)`;
      finished: whether the turn was closed by `<|im_end|>`.
    """
    stops = mode_stop_ids(tok)
    ids = [int(i) for i in ids]
    end = next((n for n, i in enumerate(ids) if i in stops), len(ids))
    completion = completion_prefix(mode, template) + tok.decode(ids[:end])
    thinking, answer = split_thinking(completion)
    finished = end < len(ids) and ids[end] == tok.eos_id
    return {"completion": completion, "thinking": thinking, "answer": answer, "finished": finished}
