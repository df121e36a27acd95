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


def _blocks(e):
    """The trace's (def, comment, code, verdict) blocks and its last line."""
    lines = e.thinking.splitlines()
    return [lines[i : i + 4] for i in range(0, len(lines) - 1, 4)], lines[-1]


def test_sft_symptom_patches_come_after_a_right_entry_point_and_fail_the_hidden_tests():
    examples = registry.generate("swe", "sft", 300, seed=0)
    helper_bugs = [e for e in examples if not _blocks(e)[0][0][3].endswith(": wrong")]
    symptom = [e for e in examples if _blocks(e)[1].startswith("patch ")]
    assert {e.uid for e in symptom} <= {e.uid for e in helper_bugs}  # the entry point is right
    assert 0.5 < len(symptom) / len(helper_bugs) < 0.7  # SFT_SYMPTOM_RATE
    for e in symptom[:30]:
        blocks, last = _blocks(e)
        assert len(blocks) == 1 and blocks[0][3].endswith(": ok")  # stops at the entry point
        top, x0 = e.meta["entry_point"], last.split("x == ")[1]
        assert f"Issue: {top}({x0}) returns" in e.prompt
        patched = swe_patch.patched(e.answer, e.meta["files"])
        assert not _passes(patched, e.meta)  # the other inputs still expose the bug
    real = [e for e in examples if not _blocks(e)[1].startswith("patch ")]
    for e in real[:30]:
        assert _passes(swe_patch.patched(e.answer, e.meta["files"]), e.meta)


def test_trace_copies_each_function_from_the_entry_point_to_the_disagreeing_line():
    for e in registry.generate("swe", "rl", 100, seed=1):
        blocks, last = _blocks(e)
        assert last == f"fix {e.meta['bug_file']}"
        assert blocks[0][0] == f"def {e.meta['entry_point']}(x):"
        source = "\n".join(e.meta["files"].values())
        for i, (name, comment, code, verdict) in enumerate(blocks):
            assert "\n".join((name, comment, code)) in source  # copied verbatim from the files
            word, c = comment.removeprefix("    # ").split()
            want, have = f"{swe._OPS[word]} {c}", " ".join(code.split()[-2:])
            right = i < len(blocks) - 1
            assert verdict == f"{want} vs {have}: {'ok' if right else 'wrong'}"
            assert (want == have) == right
        bug_file = e.meta["files"][e.meta["bug_file"]]
        assert "\n".join(blocks[-1][:3]) in bug_file
        assert want in e.answer.split("=======")[1]  # the REPLACE side


def test_levels_set_the_number_of_files():
    for level, (_, num_files, distractors) in swe.LEVELS.items():
        for e in registry.generate("swe", "eval", 20, seed=0, difficulty=level):
            assert len(e.meta["files"]) == num_files + distractors
            assert e.prompt.count("\n### ") == num_files + distractors
            golden = swe_patch.patch_file_diffs(e.meta["golden_patch"])
            assert list(golden) == [e.meta["bug_file"]]
