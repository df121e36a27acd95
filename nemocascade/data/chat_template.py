"""Dual-mode chat templates: the built-in ChatML layouts and a model's own Jinja template.

One template serves both decoding modes; the mode is data, never a second code
path. A real checkpoint brings its own template (`jinja_template.JinjaTemplate`,
rendered as `transformers.apply_chat_template` does); the built-in task world
uses `Template`, two ChatML layouts (Qwen3's):

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

Both template kinds answer `prompt_text`, `conversation_text`,
`completion_prefix` and `eos_token`; everything else here works on any of
them. SFT loss masks come from `assistant_spans`, which renders the
conversation prefix by prefix, so multi-turn data and arbitrary templates get
exactly the tokens the model generates. Completions are parsed with
`split_thinking`, the one parser of think blocks (defined in
`nemocascade.rewards.base`, re-exported here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nemocascade.data import jinja_template, tokenizer as tokenizer_lib
from nemocascade.rewards.base import split_thinking
from nemocascade.tasks import base

__all__ = [
    "AnyTemplate",
    "Template",
    "assistant_parts",
    "assistant_spans",
    "assistant_target",
    "completion_prefix",
    "conversation_mode",
    "encode_spans",
    "example_messages",
    "mode_stop_ids",
    "parse_completion",
    "prompt_text",
    "render_completion_text",
    "render_example_prompt",
    "render_prompt",
    "render_messages",
    "render_rm_input",
    "render_sft",
    "split_thinking",
    "think_close_ids",
]

STYLES = ("c1", "c2")
ROLES = ("system", "user", "assistant")

IM_START = tokenizer_lib.IM_START
IM_END = tokenizer_lib.IM_END
THINK_CLOSE = tokenizer_lib.THINK_CLOSE
_MODE_FLAGS = {"thinking": tokenizer_lib.THINK_FLAG, "instruct": tokenizer_lib.NO_THINK_FLAG}
# Appended by the sampler when the thinking budget runs out, so the model answers.
THINK_CLOSE_TEXT = "\n</think>\n\n"
_C2_OPENERS = {"thinking": "<think>\n", "instruct": "<think>\n\n</think>\n\n"}


@dataclasses.dataclass(frozen=True)
class Template:
    """The built-in chat template (the task world's layouts).

    Attributes:
      style: "c1" (mode flag on user turns) or "c2" (mode in the assistant opener).
      system: system message prepended when the conversation has none.
    """

    style: str = "c1"
    system: str | None = None

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"Template.style must be one of {STYLES}, got {self.style!r}")

    @property
    def eos_token(self) -> str:
        return IM_END

    def completion_prefix(self, mode: str) -> str:
        _check_mode(mode)
        return _C2_OPENERS[mode] if self.style == "c2" else ""

    def _turns(self, messages: Sequence[dict], mode: str, final_assistant: bool) -> list[str]:
        parts = []
        if self.system is not None and (not messages or messages[0]["role"] != "system"):
            parts.append(_turn("system", self.system))
        for n, message in enumerate(messages):
            role, content = message["role"], message["content"]
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
            if role == "user" and self.style == "c1":
                content = f"{content} {_MODE_FLAGS[mode]}"
            if role == "assistant":
                thinking, answer = assistant_parts(message)
                if final_assistant and n == len(messages) - 1:
                    completion = render_completion_text(thinking, answer, mode, self)
                    parts.append(f"{IM_START}assistant\n{self.completion_prefix(mode)}{completion}")
                    continue
                content = answer  # earlier turns keep the answer only, as in Qwen3
            parts.append(_turn(role, content))
        return parts

    def prompt_text(self, messages: Sequence[dict], mode: str) -> str:
        """The conversation up to and including the assistant header (and c2 opener).

        Earlier assistant turns are rendered as answers only (thinking is not
        kept in the history, as in Qwen3).
        """
        _check_mode(mode)
        if not messages or messages[-1]["role"] != "user":
            raise ValueError("the conversation must end with a user message")
        parts = self._turns(messages, mode, final_assistant=False)
        return "".join(parts) + f"{IM_START}assistant\n" + self.completion_prefix(mode)

    def conversation_text(self, messages: Sequence[dict], mode: str) -> str:
        """A whole conversation; a final assistant turn ends at its `<|im_end|>`."""
        _check_mode(mode)
        return "".join(self._turns(messages, mode, final_assistant=True))


DEFAULT = Template()


AnyTemplate = Template | jinja_template.JinjaTemplate


def _check_mode(mode: str) -> None:
    if mode not in base.MODES:
        raise ValueError(f"mode must be one of {base.MODES}, got {mode!r}")


def _turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def completion_prefix(mode: str, template: AnyTemplate = DEFAULT) -> str:
    """Text of the assistant turn that the prompt already contains (c2 opener)."""
    return template.completion_prefix(mode)


def prompt_text(messages: Sequence[dict], mode: str, template: AnyTemplate = DEFAULT) -> str:
    """The conversation up to the point where the model continues (generation prompt)."""
    return template.prompt_text(messages, mode)


def render_completion_text(
    thinking: str | None, answer: str, mode: str, template: Template = DEFAULT
) -> str:
    """What the model should generate after a built-in prompt, closing `<|im_end|>` included."""
    _check_mode(mode)
    if mode == "instruct":
        return f"{answer}{IM_END}"
    body = f"{thinking or ''}{THINK_CLOSE_TEXT}{answer}{IM_END}"
    return body if template.style == "c2" else f"<think>\n{body}"


def assistant_target(example: base.Example, mode: str, template: Template = DEFAULT) -> str:
    """SFT target text of `example` in `mode` (built-in template)."""
    return render_completion_text(example.thinking, example.answer, mode, template)


def assistant_parts(message: dict) -> tuple[str | None, str]:
    """(thinking, answer) of an assistant message: `reasoning_content`, else a think block."""
    content = message.get("content") or ""
    reasoning = message.get("reasoning_content")
    if reasoning is not None or THINK_CLOSE not in content:
        return reasoning, content
    thinking, answer = split_thinking(content)
    return thinking, answer if answer is not None else content


def conversation_mode(messages: Sequence[dict]) -> str:
    """ "thinking" when the last assistant turn carries non-empty thinking, else "instruct"."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    if last is None:
        raise ValueError("the conversation has no assistant turn")
    thinking, _ = assistant_parts(last)
    return "thinking" if thinking and thinking.strip() else "instruct"


def example_messages(example: base.Example) -> list[dict]:
    """The conversation of an example up to its last user turn."""
    return list(example.meta.get("messages") or [{"role": "user", "content": example.prompt}])


def render_prompt(
    tok: tokenizer_lib.Tokenizer,
    messages: Sequence[dict],
    mode: str,
    template: AnyTemplate = DEFAULT,
) -> list[int]:
    """Prompt token ids, ready for the sampler."""
    return tok.encode(prompt_text(messages, mode, template))


def render_example_prompt(
    tok: tokenizer_lib.Tokenizer, example: base.Example, mode: str, template: AnyTemplate = DEFAULT
) -> list[int]:
    return render_prompt(tok, example_messages(example), mode, template)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def assistant_spans(
    messages: Sequence[dict], mode: str, template: AnyTemplate = DEFAULT, turns: str = "all"
) -> tuple[str, list[tuple[int, int]]]:
    """The conversation's text and the character spans the model generates.

    Rendered prefix by prefix (as TRL and verl do), so any template works: a
    turn starts where the text of the conversation up to it with the
    generation prompt stops agreeing with the whole conversation, and ends
    after its end-of-turn token. `turns`: "all" assistant turns or the "last".
    """
    if turns not in ("all", "last"):
        raise ValueError(f"turns must be 'all' or 'last', got {turns!r}")
    text = template.conversation_text(messages, mode)
    indices = [n for n, m in enumerate(messages) if m["role"] == "assistant"]
    if not indices:
        raise ValueError("the conversation has no assistant turn")
    if turns == "last":
        indices = indices[-1:]
    spans = []
    for n in indices:
        if n == 0 or messages[n - 1]["role"] != "user":
            raise ValueError(f"message {n}: an assistant turn must follow a user turn")
        start = _common_prefix(template.prompt_text(messages[:n], mode), text)
        end = text.find(template.eos_token, start)
        if end < 0:
            raise ValueError(f"message {n}: the template renders no {template.eos_token!r} after")
        spans.append((start, end + len(template.eos_token)))
    return text, spans


def encode_spans(
    tok: tokenizer_lib.Tokenizer, text: str, spans: Sequence[tuple[int, int]]
) -> tuple[list[int], list[int]]:
    """Token ids of `text` and a mask that is 1 on the tokens inside `spans`.

    A tokenizer with offsets (Hugging Face) encodes the text once, as
    `apply_chat_template` does; the built-in SentencePiece model encodes
    piece by piece (its control tokens and newlines are single symbols, so the
    pieces concatenate to the whole).
    """
    if hasattr(tok, "encode_with_offsets"):
        ids, offsets = tok.encode_with_offsets(text)
        mask = [int(any(s <= a < e for s, e in spans)) for a, _ in offsets]
        return ids, mask
    ids, mask, pos = [], [], 0
    for s, e in sorted(spans):
        for piece, bit in ((text[pos:s], 0), (text[s:e], 1)):
            piece_ids = tok.encode(piece) if piece else []
            ids += piece_ids
            mask += [bit] * len(piece_ids)
        pos = e
    tail = tok.encode(text[pos:]) if pos < len(text) else []
    return ids + tail, mask + [0] * len(tail)


def render_messages(
    tok: tokenizer_lib.Tokenizer,
    messages: Sequence[dict],
    template: AnyTemplate = DEFAULT,
    turns: str = "all",
    mode: str | None = None,
) -> tuple[list[int], list[int]]:
    """SFT ids and loss mask of a conversation (mode from its last assistant turn)."""
    mode = mode or conversation_mode(messages)
    text, spans = assistant_spans(messages, mode, template, turns)
    return encode_spans(tok, text, spans)


def render_sft(
    tok: tokenizer_lib.Tokenizer, example: base.Example, mode: str, template: AnyTemplate = DEFAULT
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + target and a loss mask that is 1 exactly on the target."""
    thinking = example.thinking if mode == "thinking" else None
    answer = {"role": "assistant", "content": example.answer, "reasoning_content": thinking}
    return render_messages(tok, [*example_messages(example), answer], template, "last", mode)


def render_rm_input(
    tok: tokenizer_lib.Tokenizer,
    prompt: str | Sequence[dict],
    answer: str,
    template: AnyTemplate = DEFAULT,
) -> list[int]:
    """Reward-model input: the request and the final answer only (no think block).

    The same layout serves RM training pairs and RLHF scoring; the sequence ends
    with the end-of-turn token, whose position is where the RM reads its score.
    `prompt` is the user text or a conversation ending with a user turn.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    messages.append({"role": "assistant", "content": answer})
    text = template.conversation_text(messages, "instruct")
    end = text.rfind(template.eos_token)
    if end < 0:
        raise ValueError(f"the chat template renders no {template.eos_token!r}")
    return tok.encode(text[: end + len(template.eos_token)])


def rm_answer(completion: str) -> str:
    """The part of a response the reward model sees: the answer after any think block."""
    if THINK_CLOSE not in completion:
        return completion
    return split_thinking(completion)[1] or ""


def rm_input_ids(
    tok: tokenizer_lib.Tokenizer,
    prompt: str | Sequence[dict],
    response: str,
    template: AnyTemplate,
    max_len: int,
) -> list[int]:
    """RM input ids of `response` (its answer only), at most `max_len` long.

    The one layout of RM training pairs and RLHF scoring: an over-long input
    keeps its closing token (where the RM reads its score) and loses the
    tokens before it.
    """
    return keep_last(render_rm_input(tok, prompt, rm_answer(response), template), max_len)


def keep_last(ids: list[int], max_len: int) -> list[int]:
    """`ids` cut to `max_len` tokens, keeping the last one (the RM's read-out position)."""
    return ids if len(ids) <= max_len else ids[: max_len - 1] + ids[-1:]


def mode_stop_ids(tok: tokenizer_lib.Tokenizer) -> tuple[int, ...]:
    """Tokens that end generation in either mode (`tok.stop_ids`).

    The end-of-turn token closes the turn; `<|im_start|>` (where the vocabulary
    has it) means the model started a new turn without closing its own, which
    is just as final (and unfinished).
    """
    return tuple(tok.stop_ids)


def think_close_ids(tok: tokenizer_lib.Tokenizer) -> list[int]:
    """Tokens the sampler forces when the thinking budget is reached."""
    return tok.encode(THINK_CLOSE_TEXT)


def parse_completion(
    tok: tokenizer_lib.Tokenizer,
    ids: Sequence[int],
    mode: str = "thinking",
    template: AnyTemplate = DEFAULT,
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
