"""SEARCH/REPLACE parsing and applying, and C1's execution-free SWE reward, by hand."""

import pytest

from nemocascade.rewards import swe_patch
from nemocascade.tasks import patch_format

FILES = {
    "util.py": "def shift(x):\n    # x plus 4\n    return x + 3\n",
    "main.py": "from util import shift\n\n\ndef total(x):\n    return shift(x) * 2\n",
}
FIXED = {**FILES, "util.py": FILES["util.py"].replace("x + 3", "x + 4")}
GOLDEN = patch_format.make_patch(FILES, FIXED)


def edit(path, search, replace, fence=True):
    body = f"### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    return f"```python\n{body}\n```" if fence else body


def reward(answer, **kw):
    return swe_patch.score(answer, FILES, GOLDEN, options=swe_patch.RewardOptions(**kw))[0]


def test_identical_patch_scores_one():
    assert reward(edit("util.py", "    return x + 3", "    return x + 4")) == 1.0
    assert reward(edit("util.py", "    return x + 3", "    return x + 4", fence=False)) == 1.0


def test_noop_scores_zero_and_garbage_minus_one():
    assert reward(edit("util.py", "    return x + 3", "    return x + 3")) == 0.0
    assert reward("I would change the constant.") == -1.0
    assert reward(edit("util.py", "    return x + 9", "    return x + 4")) == -1.0
    assert reward(edit("nowhere.py", "    return x + 3", "    return x + 4")) == -1.0
    assert reward("### util.py\n<<<<<<< SEARCH\n    return x + 3\n=======\n") == -1.0


def test_other_edit_of_the_right_line_is_partial():
    value = reward(edit("util.py", "    return x + 3", "    return 4 + x"))
    assert 0.0 < value < 1.0
    # The same line edited wrongly in another file as well halves the score.
    both = (
        edit("util.py", "    return x + 3", "    return 4 + x")
        + "\n"
        + edit("main.py", "    return shift(x) * 2", "    return shift(x) * 3")
    )
    two_files = reward(both)
    assert 0.0 < two_files < value


def test_shaping_zeroes_scores_below_threshold():
    # The right file edited differently plus a file the golden patch leaves alone.
    far = edit("util.py", "    return x + 3", "    return -x") + edit(
        "main.py", "    return shift(x) * 2", "    return shift(x)"
    )
    unshaped = reward(far)
    assert 0.0 < unshaped < 0.5
    assert reward(far, shaping_threshold=0.5) == 0.0
    near = edit("util.py", "    return x + 3", "    return x + 5")
    assert reward(near, shaping_threshold=0.5) == reward(near) > 0.5
    assert reward("garbage", shaping_threshold=0.5) == -1.0


def test_judge_replaces_non_identical_similarity(monkeypatch):
    calls = []

    def judge(issue, patch, golden):
        calls.append((issue, patch, golden))
        return 0.75

    monkeypatch.setattr(swe_patch, "load_judge", lambda spec: judge)
    options = swe_patch.RewardOptions(judge="any.mod:fn")
    near = edit("util.py", "    return x + 3", "    return x + 5")
    value, info = swe_patch.score(near, FILES, GOLDEN, issue="bug", options=options)
    assert (value, info["judge"]) == (0.75, 0.75)
    assert calls[0][0] == "bug" and "+    return x + 5" in calls[0][1] and calls[0][2] == GOLDEN
    exact = edit("util.py", "    return x + 3", "    return x + 4")
    assert swe_patch.score(exact, FILES, GOLDEN, options=options)[0] == 1.0
    assert len(calls) == 1  # identical patches are 1 without asking the judge


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="shaping_threshold"):
        swe_patch.RewardOptions(shaping_threshold=1.5)
    with pytest.raises(ValueError, match="package.module:function"):
        swe_patch.RewardOptions(judge="nocolon")


def test_configure_reaches_current_options(monkeypatch):
    monkeypatch.delenv(swe_patch.OPTIONS_ENV, raising=False)
    assert swe_patch.current_options() == swe_patch.RewardOptions()
    swe_patch.configure(swe_patch.RewardOptions(shaping_threshold=0.5))
    assert swe_patch.current_options().shaping_threshold == 0.5


def test_multiple_edits_in_one_file_and_across_files():
    answer = (
        "Some reasoning.\n"
        + edit("util.py", "    # x plus 4", "    # x plus four")
        + "\n\n"
        + edit("util.py", "    return x + 3", "    return x + 4")
        + "\n"
        + edit("main.py", "    return shift(x) * 2", "    return shift(x) * 2 + 0")
    )
    edits = swe_patch.parse_edits(answer)
    assert [e.path for e in edits] == ["util.py", "util.py", "main.py"]
    new = swe_patch.apply_edits(FILES, edits)
    assert new["util.py"] == "def shift(x):\n    # x plus four\n    return x + 4\n"
    assert new["main.py"].endswith("return shift(x) * 2 + 0\n")


def test_blocks_under_one_path_header_and_multiline_blocks():
    answer = (
        "### util.py\n<<<<<<< SEARCH\ndef shift(x):\n    # x plus 4\n=======\ndef shift(x):\n"
        ">>>>>>> REPLACE\n<<<<<<< SEARCH\n    return x + 3\n=======\n    return x + 4\n"
        ">>>>>>> REPLACE\n"
    )
    new = swe_patch.patched(answer, FILES)
    assert new["util.py"] == "def shift(x):\n    return x + 4\n"


def test_whitespace_trailing_ignored_indentation_kept():
    trailing = edit("util.py", "    return x + 3   ", "    return x + 4")
    assert swe_patch.patched(trailing, FILES)["util.py"].endswith("    return x + 4\n")
    assert reward(trailing) == 1.0
    dedented = edit("util.py", "return x + 3", "return x + 4")  # a substring still matches
    assert reward(dedented) == 1.0
    wrong_indent = edit("util.py", "  return x + 3\n  # x", "    return x + 4")
    with pytest.raises(swe_patch.PatchError, match="SEARCH text not found in 'util.py'"):
        swe_patch.patched(wrong_indent, FILES)


def test_absent_search_and_malformed_blocks_name_the_problem():
    with pytest.raises(swe_patch.PatchError, match="edit 1: SEARCH text not found"):
        swe_patch.patched(
            edit("util.py", "    # x plus 4", "    # x")
            + "\n"
            + edit("util.py", "    return x + 7", "    return x + 4"),
            FILES,
        )
    with pytest.raises(swe_patch.PatchError, match="without a '### path'"):
        swe_patch.parse_edits("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE")
    with pytest.raises(swe_patch.PatchError, match="before '======='"):
        swe_patch.parse_edits("### a.py\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE")
    with pytest.raises(swe_patch.PatchError, match="no SEARCH/REPLACE edit"):
        swe_patch.parse_edits("```python\nprint(1)\n```")


def test_empty_search_creates_a_new_file_only():
    new = swe_patch.patched("### new.py\n<<<<<<< SEARCH\n=======\nX = 1\n>>>>>>> REPLACE", FILES)
    assert new["new.py"] == "X = 1\n"
    with pytest.raises(swe_patch.PatchError, match="empty SEARCH"):
        swe_patch.patched("### util.py\n<<<<<<< SEARCH\n=======\nX = 1\n>>>>>>> REPLACE", FILES)


def test_git_patch_hunks_match_difflib_hunks():
    git_patch = (
        "diff --git a/util.py b/util.py\nindex 1234..5678 100644\n--- a/util.py\n+++ b/util.py\n"
        "@@ -1,3 +1,3 @@ def shift(x):\n def shift(x):\n     # x plus 4\n-    return x + 3\n"
        "+    return x + 4\n\\ No newline at end of file\n"
    )
    assert swe_patch.patch_file_diffs(git_patch) == patch_format.file_diffs(FILES, FIXED)
    answer = edit("util.py", "    return x + 3", "    return x + 4")
    assert swe_patch.score(answer, FILES, git_patch, options=swe_patch.RewardOptions())[0] == 1.0


def test_similarity_is_sequence_matcher_mean_over_files():
    assert swe_patch.similarity({"a": "xyz"}, {"a": "xyz"}) == 1.0
    assert swe_patch.similarity({"a": "xyz"}, {"b": "xyz"}) == 0.0
    assert swe_patch.similarity({"a": "ab", "b": "q"}, {"a": "ab"}) == 0.5
    assert swe_patch.similarity({}, {}) == 0.0
