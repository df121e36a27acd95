"""The SWE generator: hidden tests fail before and pass after the golden patch (executed)."""

import pytest

from nemocascade.rewards import swe_patch, swe_verifiers
from nemocascade.tasks import patch_format, registry, swe


def _passes(files, meta) -> bool:
    result = swe_verifiers.run_hidden_tests(files, meta)
    return result.passed == result.total


@pytest.mark.parametrize("split", ["rl", "eval"])
def test_hidden_tests_fail_before_and_pass_after_the_golden_patch(split):
    for e in registry.generate("swe", split, 40, seed=3):
        files = e.meta["files"]
        assert not _passes(files, e.meta), e.prompt
        fixed = swe_patch.patched(e.answer, files)
        assert patch_format.file_diffs(files, fixed) == swe_patch.patch_file_diffs(
            e.meta["golden_patch"]
        )
        assert _passes(fixed, e.meta), e.prompt


def test_sft_symptom_patches_fail_the_hidden_tests():
    examples = registry.generate("swe", "sft", 200, seed=0)
    symptom = [e for e in examples if e.thinking.startswith("patch ")]
    assert 0.5 < len(symptom) / len(examples) < 0.7  # SFT_SYMPTOM_RATE
    for e in symptom[:30]:
        top, x0 = e.meta["entry_point"], e.thinking.split("x == ")[1]
        assert f"Issue: {top}({x0}) returns" in e.prompt
        patched = swe_patch.patched(e.answer, e.meta["files"])
        assert not _passes(patched, e.meta)  # the other inputs still expose the bug
    real = [e for e in examples if not e.thinking.startswith("patch ")]
    for e in real[:30]:
        assert _passes(swe_patch.patched(e.answer, e.meta["files"]), e.meta)


def test_trace_walks_the_calls_to_the_disagreeing_line():
    for e in registry.generate("swe", "rl", 100, seed=1):
        lines = e.thinking.splitlines()
        assert lines[-1] == f"fix {e.meta['bug_file']}"
        name, _, verdict = lines[-2].partition(": ")
        assert " not " in verdict and all(line.endswith(" ok") for line in lines[:-2])
        bug_file = e.meta["files"][e.meta["bug_file"]]
        assert f"def {name}(x):\n    # {verdict.split(' not ')[0]}\n" in bug_file
        assert lines[0].startswith(e.meta["entry_point"] + (" ok" if len(lines) > 2 else ": "))


def test_levels_set_the_number_of_files():
    for level, (_, num_files, distractors) in swe.LEVELS.items():
        for e in registry.generate("swe", "eval", 20, seed=0, difficulty=level):
            assert len(e.meta["files"]) == num_files + distractors
            assert e.prompt.count("\n### ") == num_files + distractors
            golden = swe_patch.patch_file_diffs(e.meta["golden_patch"])
            assert list(golden) == [e.meta["bug_file"]]
