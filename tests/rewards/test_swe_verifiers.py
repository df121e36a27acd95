"""The SWE verifiers on the task world and on a record of the released SWE RL format."""

import json

import pytest

from nemocascade.data import records
from nemocascade.rewards import registry, swe_verifiers, verifiers
from nemocascade.tasks import patch_format, registry as tasks_registry

FILES = {"pkg/calc.py": "def area(w, h):\n    return w + h\n", "README.md": "calc\n"}
FIXED = {**FILES, "pkg/calc.py": "def area(w, h):\n    return w * h\n"}
ANSWER = (
    "<think>\narea adds instead of multiplying\n</think>\n\n```python\n### pkg/calc.py\n"
    "<<<<<<< SEARCH\n    return w + h\n=======\n    return w * h\n>>>>>>> REPLACE\n```"
)


def released_record(files=None) -> dict:
    """A record with the fields of the released SWE RL dataset (C1 [HF-SWE])."""
    return {
        "source": "swe-fixer",
        "instance_id": "calc__calc-17",
        "prompt": "Issue: area(2, 3) returns 5, expected 6.\n\n### pkg/calc.py\n...",
        "original_prompt": "area(2, 3) returns 5",
        "golden_patch": patch_format.make_patch(FILES, FIXED),
        "relevant_file_contents": files if files is not None else FILES,
    }


@pytest.mark.parametrize(
    "files",
    [FILES, json.dumps(FILES), [{"file_path": p, "content": c} for p, c in FILES.items()]],
)
def test_released_record_loads_and_scores(tmp_path, files):
    path = tmp_path / "swe.jsonl"
    path.write_text(json.dumps(released_record(files)) + "\n")
    source = records.index(str(path), "rl")
    example = records.load(source, 0, "rl")
    assert example.domain == "swe" and example.meta["instance_id"] == "calc__calc-17"
    result = registry.get("swe")(example.prompt, ANSWER, example)
    assert result.score == 1.0
    noop = ANSWER.replace("w * h", "w + h")
    assert registry.get("swe")(example.prompt, noop, example).score == 0.0
    assert registry.get("swe")(example.prompt, "</think>no edits", example).score == -1.0
    assert registry.get("swe")(example.prompt, "<think>unfinished", example).score == 0.0


def test_bad_payloads_name_the_key(tmp_path):
    assert "golden_patch" in verifiers.payload_error(
        "swe", {**released_record(), "golden_patch": ""}
    )
    bad = released_record([{"name": "x.py"}])
    assert "'relevant_file_contents'[0]" in verifiers.payload_error("swe", bad)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**released_record(), "relevant_file_contents": {}}) + "\n")
    with pytest.raises(records.RecordError, match="relevant_file_contents"):
        records.index(str(path), "rl")


def test_task_world_reference_resolves_and_symptom_patch_does_not():
    examples = tasks_registry.generate("swe", "sft", 40, seed=2)
    swe_rows = [(e, "patch " in e.thinking) for e in examples]
    assert {s for _, s in swe_rows} == {True, False}
    for e, symptom in swe_rows[:12]:
        completion = tasks_registry.completion_text(e.thinking, e.answer)
        resolved = registry.for_domain("swe")(e.prompt, completion, e)
        reward = registry.get("swe")(e.prompt, completion, e)
        assert resolved.score == (0.0 if symptom else 1.0), resolved.info
        if symptom:
            assert reward.score < 1.0 and resolved.info["similarity"] == reward.score
        else:
            assert reward.score == 1.0 and resolved.info["similarity"] == 1.0


def test_program_joins_modules_and_drops_their_imports():
    files = {
        "a.py": "def f(x):\n    return x\n",
        "b.py": "from a import f\nimport os\n\n\ndef g(x):\n    return f(x)\n",
    }
    program = swe_verifiers.program(files)
    assert "from a import" not in program and "import os" in program
    namespace = {}
    exec(program, namespace)  # trusted test input
    assert namespace["g"](3) == 3
