"""The run's tokenizer and chat template: resolution rules and the fail-closed checks."""

import json

import pytest

from nemocascade.data import chat_template, jinja_template, text
from nemocascade.model import presets
from tests.data import test_hf_tokenizer as hf_helpers
from tests.realdata import qwen3_fixture

MESSAGES = [{"role": "user", "content": "Hi"}]


def _tok_dir(tmp_path, **build):
    tmp_path.mkdir(parents=True, exist_ok=True)
    hf_helpers._build(tmp_path / "tokenizer.json", **build)
    config = {"eos_token": "<|im_end|>", "chat_template": qwen3_fixture.CHAT_TEMPLATE}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_default_is_the_checkpoints_tokenizer_and_template(tmp_path):
    d = _tok_dir(tmp_path)
    tok, source = text.load_tokenizer("", str(d / "export"))  # a stage's export dir
    assert source == str(d) and tok.eos_id == tok.token_id("<|im_end|>")
    template = text.load_template("", source, tok=tok)
    assert isinstance(template, jinja_template.JinjaTemplate)
    assert template.prompt_text(MESSAGES, "instruct").endswith("<think>\n\n</think>\n\n")
    builtin, source = text.load_tokenizer("", str(tmp_path / "other" / "run"))
    assert source == text.BUILTIN and builtin.name == "builtin"
    assert text.load_template("", source, tok=builtin) == chat_template.Template()


def test_soft_switch_appends_the_mode_flag(tmp_path):
    d = _tok_dir(tmp_path)
    tok, source = text.load_tokenizer(str(d))
    template = text.load_template("", source, tok=tok, mode_switch="soft_switch")
    assert "Hi /no_think<|im_end|>" in template.prompt_text(MESSAGES, "instruct")
    assert "Hi /think<|im_end|>" in template.prompt_text(MESSAGES, "thinking")
    assert template.completion_prefix("thinking") == ""


def test_thinking_without_think_tokens_fails(tmp_path):
    d = _tok_dir(tmp_path, think=[])
    tok, source = text.load_tokenizer(str(d))
    model = presets.get_preset("tiny")
    text.check_model(tok, model, {"instruct"})  # instruct-only is fine
    with pytest.raises(text.TextError, match=r"thinking mode needs the tokens"):
        text.check_model(tok, model, {"thinking", "instruct"})


def test_template_errors_name_the_field(tmp_path):
    d = _tok_dir(tmp_path)
    tok, source = text.load_tokenizer(str(d))
    no_prompt = tmp_path / "plain.jinja"
    no_prompt.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(text.TextError, match=r"renders no generation prompt"):
        text.load_template(str(no_prompt), source, tok=tok)
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    with pytest.raises(text.TextError, match=r"config\.data\.chat_template.*line 1"):
        text.load_template(str(broken), source, tok=tok)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    with pytest.raises(text.TextError, match=r"has no chat_template"):
        text.load_template("", source, tok=tok)


def test_a_different_tokenizer_than_the_checkpoints_fails(tmp_path):
    ckpt = _tok_dir(tmp_path / "ckpt")
    other = tmp_path / "other"
    other.mkdir()
    hf_helpers._build(other / "tokenizer.json", specials=["<|im_end|>", "<|im_start|>", "<pad>"])
    with pytest.raises(text.TextError, match=r"carries the tokenizer .* but"):
        text.load_tokenizer(str(other), str(ckpt))
    assert text.load_tokenizer(str(ckpt), str(ckpt))[1] == str(ckpt)
