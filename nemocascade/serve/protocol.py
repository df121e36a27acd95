"""OpenAI request checks and response bodies, as pure functions of JSON values.

Requests are checked field by field; a bad one raises `ApiError` whose body
is OpenAI's error object (`{"error": {"message", "type", "param", "code"}}`)
naming the field. Unknown fields are refused, as OpenAI does ("Unrecognized
request argument supplied"), so a misspelled option never silently does
nothing.

The mode switch. `chat_template_kwargs.enable_thinking` (vLLM/SGLang's Qwen3
switch) and `reasoning_effort` select the mode: `none` or
`enable_thinking: false` is instruct; `low`/`medium`/`high` is thinking with
the server's budget for that effort; neither means thinking at the server's
default effort. Asking for both thinking off and an effort other than
`none` is a 400.

Responses carry the thinking as `reasoning_content` beside `content`, as
vLLM's reasoning parser does: thinking mode splits as the project's own
parser does (`rewards.base.split_thinking`: at `</think>`; an unfinished
think block is all reasoning with `content` null; output with no think tag
at all is content, with empty reasoning); instruct mode has
no `reasoning_content` and `content` is everything generated. `stop`
strings cut `content` (the reasoning is never cut). `usage` counts prompt
tokens once and every generated token of every choice (stop and forced
think-close tokens included, and tokens past a `stop` string: generation
runs to a stop token or `max_tokens`, strings are cut afterwards);
`completion_tokens_details.reasoning_tokens` counts the think block up to
`</think>`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from nemocascade.rollout import sampling_methods

EFFORTS = ("none", "low", "medium", "high")
ROLES = ("system", "user", "assistant")
MAX_N = 16
MAX_STOPS = 4
# Accepted with their default value only (clients send them unasked).
_DEFAULT_ONLY = {
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logprobs": (False, None),
    "user": None,  # any string: recorded by OpenAI, unused here
}
_SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "n", "stream")
CHAT_FIELDS = frozenset(
    (
        "model",
        "messages",
        "max_completion_tokens",
        "stream_options",
        "chat_template_kwargs",
        "reasoning_effort",
        *_SAMPLING,
        *_DEFAULT_ONLY,
    )
)
COMPLETION_FIELDS = frozenset(("model", "prompt", "stream_options", *_SAMPLING, *_DEFAULT_ONLY))


class ApiError(Exception):
    """An OpenAI-style error with its HTTP status."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = {404: "not_found_error", 503: "server_error"}.get(
            self.status, "invalid_request_error"
        )
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }


def bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {message}", param, code)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """The sampling fields shared by both endpoints, checked."""

    method: sampling_methods.Method
    max_tokens: int | None
    stop: tuple[str, ...]
    seed: int | None
    n: int
    stream: bool
    include_usage: bool


@dataclasses.dataclass(frozen=True)
class Chat:
    model: str | None
    messages: list[dict]
    mode: str  # "thinking" | "instruct"
    effort: str  # one of EFFORTS
    sampling: Sampling


@dataclasses.dataclass(frozen=True)
class Completion:
    model: str | None
    prompts: list[str]
    sampling: Sampling


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise bad(name, f"must be a number, got {v!r}")
    if not lo <= v <= hi:
        raise bad(name, f"must be in [{lo}, {hi}], got {v}")
    return float(v)


def _int(body: dict, name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(name, f"must be an integer, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        raise bad(name, f"must be in [{lo}, {hi if hi is not None else 'inf'}], got {v}")
    return v


def _check_fields(body: Any, allowed: frozenset) -> None:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", None, "invalid_json")
    for name in body:
        if name not in allowed:
            raise bad(name, "Unrecognized request argument supplied", "unknown_parameter")
    for name, accepted in _DEFAULT_ONLY.items():
        if accepted is not None and name in body and body[name] not in accepted:
            raise bad(name, f"only {accepted[0]!r} is supported, got {body[name]!r}", "unsupported")
    if "user" in body and not isinstance(body["user"], str):
        raise bad("user", "must be a string")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("model", f"must be a string, got {model!r}")


def parse_sampling(body: dict, defaults: dict) -> Sampling:
    """`defaults`: temperature, top_p, top_k (the server's)."""
    temperature = _number(body, "temperature", defaults["temperature"], 0.0, 2.0)
    top_p = _number(body, "top_p", defaults["top_p"], 0.0, 1.0)
    if top_p == 0.0:
        raise bad("top_p", "must be > 0")
    top_k = _int(body, "top_k", defaults["top_k"], -1)
    top_k = 0 if top_k == -1 else top_k  # vLLM's "no top-k"
    method = (
        sampling_methods.Greedy()
        if temperature == 0
        else sampling_methods.Sample(temperature=temperature, top_k=top_k, top_p=top_p)
    )
    max_tokens = _int(body, "max_tokens", None, 1)
    max_tokens = _int(body, "max_completion_tokens", max_tokens, 1)
    stop = body.get("stop")
    stops: Sequence = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad("stop", f"must be a non-empty string or a list of them, got {stop!r}")
    if len(stops) > MAX_STOPS:
        raise bad("stop", f"at most {MAX_STOPS} sequences, got {len(stops)}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"must be a boolean, got {stream!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise bad("stream_options", f"only {{'include_usage': bool}} is supported, got {options!r}")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad("stream_options.include_usage", f"must be a boolean, got {include_usage!r}")
    return Sampling(
        method=method,
        max_tokens=max_tokens,
        stop=tuple(stops),
        seed=_int(body, "seed", None, -(2**63), 2**63 - 1),
        n=_int(body, "n", 1, 1, MAX_N),
        stream=stream,
        include_usage=include_usage,
    )


def _content(message: dict, i: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            return "".join(str(p.get("text", "")) for p in content)
        raise bad(f"messages[{i}].content", "only text parts are supported")
    raise bad(
        f"messages[{i}].content", f"must be a string or a list of text parts, got {content!r}"
    )


def parse_messages(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}]", f"must be an object, got {m!r}")
        if m.get("role") not in ROLES:
            raise bad(f"messages[{i}].role", f"must be one of {ROLES}, got {m.get('role')!r}")
        msg = {"role": m["role"], "content": _content(m, i)}
        if m["role"] == "assistant" and isinstance(m.get("reasoning_content"), str):
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    if out[-1]["role"] != "user":
        raise bad("messages", f"the last message must be a user turn, got {out[-1]['role']!r}")
    return out


def parse_mode(body: dict, default_effort: str) -> tuple[str, str]:
    """(mode, effort) from `chat_template_kwargs.enable_thinking` and `reasoning_effort`."""
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict) or set(kwargs) - {"enable_thinking"}:
        raise bad(
            "chat_template_kwargs", f"only {{'enable_thinking': bool}} is supported, got {kwargs!r}"
        )
    enable = kwargs.get("enable_thinking")
    if enable is not None and not isinstance(enable, bool):
        raise bad("chat_template_kwargs.enable_thinking", f"must be a boolean, got {enable!r}")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise bad("reasoning_effort", f"must be one of {EFFORTS}, got {effort!r}")
    if enable is False:
        if effort not in (None, "none"):
            raise bad("reasoning_effort", f"{effort!r} asks for thinking, enable_thinking is false")
        return "instruct", "none"
    effort = effort or default_effort
    return ("instruct" if effort == "none" else "thinking"), effort


def parse_chat(body: Any, defaults: dict) -> Chat:
    _check_fields(body, CHAT_FIELDS)
    messages = parse_messages(body.get("messages"))
    mode, effort = parse_mode(body, defaults["effort"])
    return Chat(body.get("model"), messages, mode, effort, parse_sampling(body, defaults))


def parse_completion(body: Any, defaults: dict) -> Completion:
    _check_fields(body, COMPLETION_FIELDS)
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise bad("prompt", "must be a string or a non-empty list of strings")
    return Completion(body.get("model"), prompts, parse_sampling(body, defaults))


def cut_at_stop(text: str | None, stops: Sequence[str]) -> tuple[str | None, bool]:
    """`text` up to the first stop string (excluded) and whether one was found."""
    if text is None or not stops:
        return text, False
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None = None) -> dict:
    out = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out
