"""Property-based fuzzing: no input crashes the answer parser, the completion parser or the
verifiers; bad input is an error value (a score of 0 with a reason, a message), never an
exception from deep inside."""

import hypothesis
from hypothesis import strategies as st

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.rewards import base, verifiers
from nemocascade.tasks import base as tasks_base

TOK = tokenizer_lib.Tokenizer.load()
_PIECES = st.sampled_from(
    ["<think>", "</think>", "\\boxed{", "}", "{", "\n", " ", "42", "\\frac{1}{2}", "x", "```"]
)
_TEXT = st.lists(_PIECES | st.text(max_size=6), max_size=12).map("".join)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    ["answer", "gold", "tests", "test", "entry_point", "instruction_id_list", "kwargs", "x"]
)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=_TEXT)
def test_split_thinking_never_raises(text):
    thinking, answer = base.split_thinking(text)
    assert thinking is None or isinstance(thinking, str)
    assert answer is None or isinstance(answer, str)
    assert thinking is not None or answer is not None


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    ids=st.lists(st.integers(0, TOK.vocab_size - 1), max_size=40),
    mode=st.sampled_from(["thinking", "instruct"]),
    style=st.sampled_from(["c1", "c2"]),
)
def test_parse_completion_never_raises(ids, mode, style):
    out = chat_template.parse_completion(TOK, ids, mode, chat_template.Template(style=style))
    assert set(out) == {"completion", "thinking", "answer", "finished"}


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    meta=st.dictionaries(_KEYS, _JSON, max_size=4),
    domain=st.sampled_from(["math", "code", "if", "chat"]),
)
def test_payload_checks_return_a_message_not_an_exception(meta, domain):
    problem = verifiers.payload_error(domain, meta)
    assert problem is None or isinstance(problem, str)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(completion=_TEXT, gold=st.sampled_from(["42", "\\frac{1}{2}", "(0,1]", "x^2"]))
def test_math_verifier_scores_any_text(completion, gold):
    example = tasks_base.Example("f", "math", 0, "q", "", "", {"answer": gold})
    result = verifiers.math("q", completion, example)
    assert result.score in (0.0, 1.0)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(completion=_TEXT)
def test_if_verifier_scores_any_text(completion):
    meta = {
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"relation": "at least", "num_words": 3}],
    }
    example = tasks_base.Example("f", "if", 0, "Write.", "", "", meta)
    result = verifiers.instruction_following("Write.", completion, example)
    assert result.score in (0.0, 1.0)
