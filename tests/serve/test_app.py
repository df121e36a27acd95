"""The server through the official `openai` client: modes, budgets, streaming, n, errors."""

import httpx
import openai
import pytest

from nemocascade import generate
from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.rollout import modes, sampling_methods
from nemocascade.serve import cli
from tests.serve import helpers

PROMPT = [{"role": "user", "content": "Compute 12 + 30."}]
SAMPLED = dict(temperature=1.0, top_p=0.95, extra_body={"top_k": 20})
INSTRUCT = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    stage_dir, params = helpers.export_toy(tmp_path_factory.mktemp("run"))
    model, engine = helpers.load(stage_dir)
    with helpers.Serving(model, engine) as s:
        s.params = params
        yield s
    engine.close()


def _direct(params, mode_name, budget, max_tokens):
    """The project's own greedy completion of PROMPT (generate.complete)."""
    tok = tokenizer_lib.Tokenizer.load()
    mode = modes.get(mode_name, tok, thinking_budget=budget)
    (out,) = generate.complete(
        params,
        helpers.CFG,
        tok,
        [{"messages": PROMPT}],
        mode,
        method=sampling_methods.Greedy(),
        max_new_tokens=max_tokens,
        batch_size=1,
        seed=0,
        mesh=None,
        rules=None,
    )
    return out, mode


def test_models_and_health(served):
    assert [m.id for m in served.client().models.list()] == ["sft"]
    health = httpx.get(f"{served.url}/health").json()
    assert health["status"] == "ok" and health["active"] == 0


def test_instruct_mode_has_no_reasoning_and_matches_the_sampler(served):
    client = served.client()
    kw = dict(model="sft", messages=PROMPT, temperature=0, max_tokens=12)
    a = client.chat.completions.create(**kw, extra_body=INSTRUCT)
    b = client.chat.completions.create(**kw, reasoning_effort="none")
    msg = a.choices[0].message
    assert getattr(msg, "reasoning_content", None) is None
    assert "reasoning_content" not in (msg.model_extra or {})
    assert msg.content == b.choices[0].message.content
    expected, _ = _direct(served.params, "instruct", None, 12)
    assert msg.content == expected["completion"].strip()
    assert a.usage.completion_tokens == expected["num_tokens"]
    assert a.usage.prompt_tokens == len(
        modes.get("instruct", tokenizer_lib.Tokenizer.load()).prompt(
            tokenizer_lib.Tokenizer.load(), PROMPT
        )
    )
    assert a.choices[0].finish_reason == ("length" if expected["truncated"] else "stop")


def test_thinking_mode_respects_the_effort_budget(served):
    client = served.client()
    close = len(chat_template.think_close_ids(tokenizer_lib.Tokenizer.load()))
    for effort, budget in (("low", 4), ("medium", 12)):
        r = client.chat.completions.create(
            model="sft", messages=PROMPT, temperature=0, max_tokens=24, reasoning_effort=effort
        )
        msg = r.choices[0].message
        assert msg.reasoning_content is not None
        reasoning = r.usage.completion_tokens_details.reasoning_tokens
        assert 0 < reasoning <= budget + close
        expected, _ = _direct(served.params, "thinking", budget, 24)
        assert msg.reasoning_content == expected["thinking"]
        assert msg.content == expected["answer"]
        assert r.usage.completion_tokens == expected["num_tokens"]
    # Thinking is the default; enable_thinking=True equals the default effort (high).
    default = client.chat.completions.create(
        model="sft", messages=PROMPT, temperature=0, max_tokens=24
    )
    on = client.chat.completions.create(
        model="sft",
        messages=PROMPT,
        temperature=0,
        max_tokens=24,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    )
    assert default.choices[0].message.reasoning_content is not None
    assert default.choices[0].message == on.choices[0].message


def _joined(stream):
    fields, finish, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            got = fields.setdefault(c.index, {"content": "", "reasoning_content": ""})
            for name in got:
                got[name] += getattr(c.delta, name, None) or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return fields, finish, usage


@pytest.mark.parametrize("effort", ["low", "none"])
def test_stream_equals_non_stream_for_the_same_seed(served, effort):
    client = served.client()
    kw = dict(
        model="sft",
        messages=PROMPT,
        max_tokens=16,
        seed=7,
        n=2,
        reasoning_effort=effort,
        stop=["e", "a"],  # deltas never show a stop string's start and take it back
    )
    whole = client.chat.completions.create(**kw, **SAMPLED)
    again = client.chat.completions.create(**kw, **SAMPLED)
    assert whole.choices == again.choices  # the seed fixes the sample
    stream = client.chat.completions.create(
        **kw, **SAMPLED, stream=True, stream_options={"include_usage": True}
    )
    fields, finish, usage = _joined(stream)
    for c in whole.choices:
        assert fields[c.index]["content"] == (c.message.content or "")
        assert fields[c.index]["reasoning_content"] == (
            getattr(c.message, "reasoning_content", None) or ""
        )
        assert finish[c.index] == c.finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_n_choices_are_independent_samples(served):
    r = served.client().chat.completions.create(
        model="sft",
        messages=PROMPT,
        max_tokens=16,
        n=4,
        seed=2**40 + 3,
        reasoning_effort="none",
        **SAMPLED,
    )
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert len({c.message.content for c in r.choices}) > 1
    assert r.usage.completion_tokens <= 4 * 16 and r.usage.prompt_tokens > 0


def test_completions_endpoint_streams_the_same_text(served):
    client = served.client()
    kw = dict(model="sft", prompt=["Compute 2 + 3.", "Say hi."], max_tokens=8, temperature=0)
    whole = client.completions.create(**kw)
    assert [c.index for c in whole.choices] == [0, 1]
    texts = ["", ""]
    for chunk in client.completions.create(**kw, stream=True):
        for c in chunk.choices:
            texts[c.index] += c.text
    assert texts == [c.text for c in whole.choices]
    stop = whole.choices[0].text[2:4]
    if stop:  # a stop string cuts the text before it
        cut = client.completions.create(**kw, stop=[stop]).choices[0]
        assert cut.text == whole.choices[0].text[: whole.choices[0].text.find(stop)]
        assert cut.finish_reason == "stop"


@pytest.mark.parametrize(
    "extra, status, param",
    [
        ({"temperature": 5}, 400, "temperature"),
        ({"reasoning_effort": "extreme"}, 400, "reasoning_effort"),
        ({"bogus_field": 1}, 400, "bogus_field"),
        ({"n": 0}, 400, "n"),
        ({"stop": [1, 2]}, 400, "stop"),
        (
            {"chat_template_kwargs": {"enable_thinking": "no"}},
            400,
            "chat_template_kwargs.enable_thinking",
        ),
        (
            {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"},
            400,
            "reasoning_effort",
        ),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ({"max_tokens": 10_000}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "nine " * 2100}]}, 400, "messages"),
        ({"model": "gpt-5"}, 404, "model"),
    ],
)
def test_bad_requests_get_openai_errors(served, extra, status, param):
    body = {"model": "sft", "messages": PROMPT, "max_tokens": 4, **extra}
    r = httpx.post(f"{served.url}/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and err["type"]


def test_malformed_json_unknown_route_and_client_errors(served):
    r = httpx.post(
        f"{served.url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(f"{served.url}/v1/chat/completions", json=[1, 2])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.get(f"{served.url}/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    client = served.client()
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="other", messages=PROMPT)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="sft", messages=[{"role": "user", "content": "nine " * 2100}]
        )
    assert e.value.code == "context_length_exceeded"
    # The server is still up and every slot is free again.
    assert httpx.get(f"{served.url}/health").json()["active"] == 0


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--workdir=/nonexistent"], "serve: --workdir=/nonexistent does not exist"),
        (["--workdir=/tmp", "--budget_low=-2"], "--budget_low must be >= 0 or -1"),
    ],
)
def test_cli_usage_errors_name_the_flag(flags, match):
    with pytest.raises(SystemExit, match=match):
        cli.main(flags)
