"""The vendored IFEval checker against lm-evaluation-harness's reference, and IFBench offline.

The reference (`lm_eval.tasks.ifeval`) is imported with `nltk.download`
replaced by a no-op, so it cannot download anything. Two of its 25 types need
NLTK punkt data (`length_constraints:number_sentences` counts sentences with
punkt, `change_case:capital_word_frequency` tokenizes words with punkt_tab);
when that data is absent (as on these machines) the reference cannot run them,
so they are compared only if punkt is installed and are otherwise checked
against hand-counted expectations (`test_offline_sentence_and_capital_counts`).
"""

import itertools
import json

import langdetect
import nltk
import pytest

from nemocascade.rewards import verifiers
from nemocascade.rewards.ifeval import ifbench, instructions_util, scoring
from nemocascade.tasks import base as tasks_base

PUNKT_TYPES = ("length_constraints:number_sentences", "change_case:capital_word_frequency")
PROMPT = "Write a short note about potatoes."

# (instruction id, kwargs): every IFEval type, several with two settings.
CONFIGS = [
    ("keywords:existence", {"keywords": ["potato", "morning"]}),
    ("keywords:frequency", {"keyword": "the", "frequency": 2, "relation": "at least"}),
    ("keywords:frequency", {"keyword": "answer", "frequency": 2, "relation": "less than"}),
    ("keywords:forbidden_words", {"forbidden_words": ["comma", "yes"]}),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}),
    ("keywords:letter_frequency", {"letter": "e", "let_frequency": 5, "let_relation": "less than"}),
    ("language:response_language", {"language": "es"}),
    ("language:response_language", {"language": "en"}),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"}),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"}),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}),
    ("length_constraints:number_words", {"num_words": 20, "relation": "at least"}),
    ("length_constraints:number_words", {"num_words": 8, "relation": "less than"}),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "second"},
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}),
    ("detectable_format:constrained_response", {}),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}),
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 2}),
    ("detectable_format:json_format", {}),
    ("detectable_format:title", {}),
    ("combination:two_responses", {}),
    ("combination:repeat_prompt", {"prompt_to_repeat": PROMPT}),
    ("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"}),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at least"},
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
    ),
    ("change_case:english_capital", {}),
    ("change_case:english_lowercase", {}),
    ("punctuation:no_comma", {}),
    ("startend:quotation", {}),
]

BODY = "the potato grows in the soil and the farmer digs it up in the morning"
RESPONSES = [
    "Hello world. This is a simple answer, with a comma.",
    f"{BODY}.\n\n***\n\nsecond paragraph is here.\n\n***\n\nthird one closes it.",
    "THIS IS ALL IN CAPITAL LETTERS. EVERY WORD SHOUTS LOUDLY!",
    '```json\n{"name": "potato", "count": 3}\n```',
    '{"a": [1, 2, 3]}',
    "<<A Note on Potatoes>>\nThe potato is good in the morning.",
    "* first point\n* second point\n* third point",
    "- one\n- two",
    "This has *one highlight* and *another highlight* and **a bold one**.",
    "SECTION 1\nThe first part.\nSECTION 2\nThe second part.",
    "The body of the letter.\n\nP.S. remember the potato.",
    "Dear [name], please come to [address] at [time].",
    "first answer about potatoes\n******\nsecond answer about potatoes",
    '"the whole response is wrapped in quotes"',
    "Potatoes are tubers. Is there anything else I can help with?",
    "My answer is yes.",
    "My answer is maybe.",
    "Hola, me llamo Juan y vivo en Madrid con mi familia. Me gustan mucho las patatas.",
    f"{PROMPT} Potatoes are starchy tubers that grow underground.",
    "first paragraph here\n\nsecond paragraph starts with second\n\nthird paragraph",
    "first paragraph here\n\nSecond paragraph starts with Second\n\nthird paragraph",
    " ".join([BODY] * 3) + ".",
    "Zany zebras zigzag, buzzing with zeal in the zoo.",
    "Mr. Smith went to Washington. He arrived at 3 p.m. today! Did he? Yes.",
    "Sure! Here it is:\n**all lowercase now**\nthe rest is in lowercase too\nhope this helps",
    "NASA and the FBI met the CIA.",
    "   ",
    "short",
]
# Each base response also lower-cased, upper-cased and wrapped in quotes: 112 responses.
RESPONSES = [v for r in RESPONSES for v in (r, r.lower(), r.upper(), f'"{r}"')]


def _reference():
    """lm-eval's IFEval utils, imported with downloads disabled."""
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: False
    try:
        from lm_eval.tasks.ifeval import utils
    finally:
        nltk.download = saved
    return utils


def _has_punkt() -> bool:
    try:
        nltk.data.find("tokenizers/punkt_tab")
        nltk.data.find("tokenizers/punkt")
        return True
    except LookupError:
        return False


CASES = list(itertools.product(range(len(CONFIGS)), range(len(RESPONSES))))


def test_fixture_covers_every_type_with_both_outcomes():
    assert {i for i, _ in CONFIGS} == set(scoring.IFEVAL_IDS)
    assert len(scoring.IFEVAL_IDS) == 25 and len(RESPONSES) >= 100
    outcomes = {}
    for c, r in CASES:
        (ok,) = scoring.follows(RESPONSES[r], [CONFIGS[c][0]], [CONFIGS[c][1]], PROMPT)
        outcomes.setdefault(CONFIGS[c][0], set()).add(ok)
    assert all(v == {True, False} for v in outcomes.values()), outcomes


@pytest.mark.parametrize("loose", [False, True], ids=["strict", "loose"])
def test_agrees_with_reference(loose):
    langdetect.DetectorFactory.seed = 0
    utils = _reference()
    run_punkt = _has_punkt()
    compared = disagreements = 0
    for c, r in CASES:
        instruction_id, kwargs = CONFIGS[c]
        if instruction_id in PUNKT_TYPES and not run_punkt:
            continue
        inp = utils.InputExample(0, [instruction_id], PROMPT, [kwargs])
        ref_fn = (
            utils.test_instruction_following_loose
            if loose
            else (utils.test_instruction_following_strict)
        )
        ref = ref_fn(inp, RESPONSES[r]).follow_instruction_list
        ours = scoring.follows(RESPONSES[r], [instruction_id], [kwargs], PROMPT, loose=loose)
        compared += 1
        disagreements += ours != ref
        assert ours == ref, (instruction_id, kwargs, RESPONSES[r])
    print(
        f"IFEval {'loose' if loose else 'strict'}: {compared} checks on {len(RESPONSES)} "
        f"responses, {compared - disagreements} agree"
    )
    assert compared >= 2000 and disagreements == 0


@pytest.mark.parametrize(
    ("text", "sentences", "capital_words"),
    [
        ("Hello world. This is it.", 2, 0),
        ("Mr. Smith went to Washington. He arrived at 3 p.m. today! Did he? Yes.", 4, 0),
        ("THIS IS LOUD. VERY LOUD!", 2, 5),
        ("NASA and the FBI met the CIA.", 1, 3),
        ("One sentence without a stop", 1, 0),
        ("Wait... what? OK.", 3, 1),
    ],
)
def test_offline_sentence_and_capital_counts(text, sentences, capital_words):
    assert instructions_util.count_sentences(text) == sentences
    assert sum(w.isupper() for w in instructions_util.word_tokenize(text)) == capital_words


def test_prompt_and_instruction_level_accuracy():
    ids = ["punctuation:no_comma", "change_case:english_lowercase"]
    kwargs = [{}, {}]
    text = "the cat sat on the mat and then it slept all day long in the sun"
    responses = [text.replace("mat", "mat,"), text, f"**The Cat**\n{text}"]
    results = [
        (scoring.follows(r, ids, kwargs), scoring.follows(r, ids, kwargs, loose=True))
        for r in responses
    ]
    assert [s for s, _ in results] == [[False, True], [True, True], [True, False]]
    assert results[2][1] == [True, True]  # loose drops the first line
    acc = scoring.accuracy(results)
    assert acc["prompt_level_strict_acc"] == pytest.approx(1 / 3)
    assert acc["inst_level_strict_acc"] == pytest.approx(4 / 6)
    assert acc["prompt_level_loose_acc"] == pytest.approx(2 / 3)
    assert acc["inst_level_loose_acc"] == pytest.approx(5 / 6)


def _ifbench_records():
    with open(ifbench.data_path()) as f:
        return [json.loads(line) for line in f]


def test_ifbench_ids_run_offline_except_the_named_ones():
    records = _ifbench_records()
    assert len(records) == 294
    ids = {i for r in records for i in r["instruction_id_list"]}
    assert len(ids) == 57 and set(ifbench.UNSUPPORTED) <= ids
    for record in records:
        for instruction_id, kwargs in zip(
            record["instruction_id_list"], record["kwargs"], strict=True
        ):
            if instruction_id in ifbench.UNSUPPORTED:
                with pytest.raises(ValueError, match="not supported offline"):
                    scoring.follows("Some text.", [instruction_id], [kwargs], record["prompt"])
            else:
                scoring.follows(
                    "Some text. More text!", [instruction_id], [kwargs], record["prompt"]
                )


def test_ifbench_checks_score_both_ways():
    ids = ["format:no_whitespace", "count:numbers"]
    kwargs = [{}, {"N": 2}]
    assert scoring.follows("no_spaces_here", ids[:1], kwargs[:1]) == [True]
    assert scoring.follows("has spaces", ids[:1], kwargs[:1]) == [False]
    assert scoring.follows("I have 3 cats and 4 dogs.", ids[1:], kwargs[1:]) == [True]
    assert scoring.follows("I have 3 cats.", ids[1:], kwargs[1:]) == [False]


def _if_example(ids, kwargs):
    meta = {"instruction_id_list": ids, "kwargs": kwargs}
    return tasks_base.Example("u", "if", 0, PROMPT, "", "", meta)


def test_if_verifier_on_ifeval_records():
    ex = _if_example(["punctuation:no_comma", "change_case:english_lowercase"], [{}, {}])
    right = verifiers.instruction_following("", "<think>\nA, B\n</think>\n\nall fine here", ex)
    assert right.score == 1.0
    assert right.info["instructions"] == {
        "punctuation:no_comma": True,
        "change_case:english_lowercase": True,
    }
    assert verifiers.instruction_following("", "all fine, here", ex).score == 0.0
    assert verifiers.instruction_following("", "<think>\nall fine", ex).score == 0.0


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({}, "'instruction_id_list'"),
        ({"instruction_id_list": ["punctuation:no_comma"]}, "'kwargs'"),
        ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, "'kwargs'"),
        ({"instruction_id_list": ["nope:x"], "kwargs": [{}]}, "unknown instruction id"),
        ({"instruction_id_list": ["ratio:stop_words"], "kwargs": [{}]}, "not supported offline"),
    ],
)
def test_if_payload_errors(meta, message):
    assert message in verifiers.payload_error("if", meta)
    with pytest.raises(ValueError, match=message):
        verifiers.instruction_following(
            "",
            "x",
            _if_example(**{"ids": meta.get("instruction_id_list"), "kwargs": meta.get("kwargs")}),
        )
