"""Record files: formats, schema errors naming file:line:field, weights, fuzzed input."""

import json

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from nemocascade.data import pipelines, records

CONV = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def _jsonl(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


@pytest.mark.parametrize(
    "line, kind, match",
    [
        ('{"messages": [', "sft", r"not valid JSON"),
        ("[1, 2]", "sft", r"a record must be a JSON object, got list"),
        ({"messages": []}, "sft", r"field 'messages': must be a non-empty list"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "sft", r"field 'messages\[0\]\.role'"),
        (
            {"messages": [{"role": "user", "content": "x"}]},
            "sft",
            r"field 'messages': has no assistant turn",
        ),
        (
            {"prompt": 123, "domain": "math", "answer": "1"},
            "rl",
            r"field 'prompt': must be a string",
        ),
        ({"prompt": None, "domain": "math", "answer": "1"}, "rl", r"field 'prompt': missing"),
        ({"prompt": "2+2?", "domain": "poetry"}, "rl", r"field 'domain': must be one of"),
        ({"prompt": "2+2?", "domain": "math"}, "rl", r".*'answer'"),
        ({"prompt": "2+2?", "domain": "math", "answer": 4}, "rl", r".*'answer'"),
        ({"prompt": "Hi", "chosen": "a"}, "preference", r"field 'rejected': missing"),
        ({"prompt": "Hi", "chosen": 5, "rejected": "b"}, "preference", r"field 'chosen': must be"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path, line, kind, match):
    good = {
        "sft": {"messages": CONV},
        "rl": {"prompt": "1+1?", "domain": "math", "answer": "2"},
        "preference": {"prompt": "Hi", "chosen": "a", "rejected": "b"},
    }[kind]
    path = _jsonl(tmp_path / "d.jsonl", [good, line])
    with pytest.raises(records.RecordError, match=r"d\.jsonl:2: " + match):
        records.index(path, kind)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(records.RecordError, match=r"empty\.jsonl: no sft records"):
        records.index(str(empty), "sft")
    with pytest.raises(records.RecordError, match=r"nope\.jsonl: no such file"):
        records.index(str(tmp_path / "nope.jsonl"), "sft")
    with pytest.raises(records.RecordError, match=r"unknown data format"):
        records.index(str(empty.rename(tmp_path / "x.csv")), "sft")


def test_parquet_and_saved_dataset_read_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": f"{i} + 1?", "domain": "math", "answer": str(i + 1)} for i in range(7)]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, str(tmp_path / "d.parquet"), row_group_size=3)
    saved = tmp_path / "saved"
    saved.mkdir()
    with (
        pa.OSFile(str(saved / "data-00000-of-00001.arrow"), "wb") as f,
        pa.ipc.new_stream(f, table.schema) as w,
    ):
        w.write_table(table)
    jsonl = _jsonl(tmp_path / "d.jsonl", rows)
    for path in (str(tmp_path / "d.parquet"), str(saved), jsonl):
        source = records.index(path, "rl")
        examples = [records.load(source, i, "rl") for i in range(len(source))]
        assert [e.meta["answer"] for e in examples] == [r["answer"] for r in rows]
        assert examples[5].uid == f"{path}:6"
    bad = pa.Table.from_pylist(rows[:2] + [{"prompt": "x", "domain": "math", "answer": None}])
    pq.write_table(bad, str(tmp_path / "bad.parquet"))
    with pytest.raises(records.RecordError, match=r"bad\.parquet:3: .*'answer'"):
        records.index(str(tmp_path / "bad.parquet"), "rl")


def test_file_weights_and_shards(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [{"prompt": f"a{i}", "domain": "chat"} for i in range(10)])
    b = _jsonl(tmp_path / "b.jsonl", [{"prompt": f"b{i}", "domain": "chat"} for i in range(10)])
    files = pipelines.Files([a, b], "rl", weights=(2.0, 0.5), seed=1)
    prompts = [files[i].prompt for i in range(len(files))]
    assert len(prompts) == 25
    assert sum(p.startswith("a") for p in prompts) == 20 and len(set(prompts)) == 15
    loaders = [
        pipelines.rl_prompts(batch_size=1, files=[a, b], shard_index=s, shard_count=2, num_epochs=1)
        for s in (0, 1)
    ]
    seen = [{item["example"].uid for (item,) in loader} for loader in loaders]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 20


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(["prompt", "messages", "domain", "answer", "chosen", "rejected", "role"])
_RECORD = st.dictionaries(_KEYS, _JSON | st.sampled_from(["math", "user", "assistant"]), max_size=5)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(record=_RECORD | _JSON, kind=st.sampled_from(records.KINDS))
def test_no_record_crashes_the_checks(record, kind):
    """Any JSON value is either accepted or a RecordError naming where — nothing else."""
    try:
        records.parse(kind, "f.jsonl:1", record)
    except records.RecordError as e:
        assert str(e).startswith("f.jsonl:1")


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(lines=st.lists(st.binary(max_size=40), max_size=5))
def test_no_file_content_crashes_the_indexer(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_bytes(b"\n".join(lines))
    try:
        source = records.index(str(path), "sft")
    except records.RecordError:
        return
    assert len(source) >= 1 and np.all([records.load(source, i, "sft") for i in range(len(source))])
