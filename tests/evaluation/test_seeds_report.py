"""The seeds report: mean ± sd per cell and per stage delta over several fake workdirs."""

import json
import os
import subprocess
import sys

import pytest

from nemocascade.evaluation import matrix, report, seeds_report

STAGES = ("sft", "stage2_medium", "stage3_long")
MATH, CODE = "math/thinking/pass@1", "code/thinking/pass@1"
# Per seed: {stage: (math, code)}; seed 2 has no stage3_long.
VALUES = [
    {"sft": (0.50, 0.2), "stage2_medium": (0.70, 0.2), "stage3_long": (0.50, 0.5)},
    {"sft": (0.40, 0.2), "stage2_medium": (0.55, 0.2), "stage3_long": (0.45, 0.3)},
    {"sft": (0.60, 0.2), "stage2_medium": (0.85, 0.2)},
]
CONFIGS = {  # the parts of each stage's config.json the report reads (seed 0 only)
    "stage2_medium": {"rl": {"domains": ["math"]}, "eval": {"num_per_domain": 128}},
    "stage3_long": {"rl": {"domains": ["code"]}, "eval": {}},
}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _workdirs(tmp_path) -> list[str]:
    dirs = []
    for seed, stages in enumerate(VALUES):
        w = tmp_path / f"s{seed}"
        for stage, (m, c) in stages.items():
            metrics = {MATH: m, CODE: c, "math/thinking/mean_len": 10.0}
            matrix.write(str(w / stage / "eval_matrix.json"), stage, metrics)
            if seed == 0 and stage in CONFIGS:
                (w / stage / "config.json").write_text(json.dumps(CONFIGS[stage]))
        dirs.append(str(w))
    return dirs


def test_mean_sd_is_the_sample_sd():
    mean, sd, n = seeds_report.mean_sd([0.5, 0.4, 0.6])
    assert (mean, sd, n) == (pytest.approx(0.5), pytest.approx(0.1), 3)
    assert seeds_report.mean_sd([0.3])[1] != seeds_report.mean_sd([0.3])[1]  # NaN below 2
    assert seeds_report.mean_sd([])[2] == 0


def test_summary_and_report_text(tmp_path):
    dirs = _workdirs(tmp_path)
    out = tmp_path / "out"
    path = seeds_report.write(dirs, STAGES, str(out), tolerance=0.03, default_num_prompts=100)
    summary = json.loads((out / "summary.json").read_text())
    st = summary["stages"]
    assert [st[s]["n"] for s in STAGES] == [3, 3, 2]
    assert st["sft"]["cells"][MATH] == {
        "mean": pytest.approx(0.5),
        "sd": pytest.approx(0.1),
        "n": 3,
    }
    assert st["stage2_medium"]["delta"][MATH] == {
        "mean": pytest.approx(0.20),
        "sd": pytest.approx(0.05),
        "n": 3,
    }
    assert st["stage3_long"]["cells"][MATH]["mean"] == pytest.approx(0.475)
    assert st["stage3_long"]["delta"][MATH] == {
        "mean": pytest.approx(-0.15),
        "sd": pytest.approx(0.0707107),
        "n": 2,
    }
    assert st["sft"]["delta"] == {}
    assert summary["num_prompts"] == {"sft": 100, "stage2_medium": 128, "stage3_long": 100}
    gains = summary["own_domain_gain"]
    assert set(gains) == {"stage2_medium", "stage3_long"}
    assert gains["stage3_long"][CODE]["sd"] == pytest.approx(0.1414214)
    assert summary["forgetting"] == [
        "math/thinking/pass@1: mean 47.5 after stage3_long, 22.5 points below its best "
        "earlier mean 70.0 (after stage2_medium)"
    ]

    with open(path) as f:
        text = f.read()
    # columns: chat ×2, if ×2, math/thinking, math/instruct, code/thinking, code/instruct, swe ×2
    assert "| sft | 3 | – | – | – | – | 50.0 ± 10.0 | – | 20.0 ± 0.0 | – | – | – |" in text
    assert "| stage3_long | 2 | – | – | – | – | 47.5 ± 3.5 | – | 40.0 ± 14.1 |" in text
    assert "| stage2_medium | 3 | – | – | – | – | +20.0 ± 5.0 | – | +0.0 ± 0.0 |" in text
    assert "| stage3_long | 2 | – | – | – | – | -15.0 ± 7.1 | – | +20.0 ± 14.1 |" in text
    assert "| stage2_medium | math RL | math/thinking | +20.0 ± 5.0 | 3 |" in text
    assert "| stage3_long | code RL | code/thinking | +20.0 ± 14.1 | 2 |" in text
    # binomial noise: sqrt(.5 * .5 / 100) at sft, sqrt(.7 * .3 / 128) at stage2_medium
    assert "| sft | 100 | – | – | – | – | 5.0 |" in text
    assert "| stage2_medium | 128 | – | – | – | – | 4.1 |" in text
    assert (
        "Prompts per cell of sft, stage3_long from --num_prompts=100 (no config.json of the "
        "stage records it); stage2_medium from its config.json (`eval.num_per_domain`)."
    ) in text
    assert "**math/thinking/pass@1: mean 47.5 after stage3_long" in text
    # each seed's own table, from the single-run report
    tables = [report.collect(w, STAGES) for w in dirs]
    for t in tables:
        assert "\n".join(report._table(t, [s for s in STAGES if s in t])) in text
    assert "| stage3_long |" not in text.split(f"### `{dirs[2]}`")[1]
    assert (out / "eval_heatmap.png").read_bytes()[:4] == b"\x89PNG"


def _cli(*args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "nemocascade.report", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_cli_writes_the_seeds_report(tmp_path):
    dirs = _workdirs(tmp_path)
    r = _cli(f"--workdirs={','.join(dirs)}", f"--out={tmp_path / 'out'}", "--num_prompts=100")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "out" / "report.md")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["stages"]) == list(STAGES)  # found in the workdirs, in chain order


def test_cli_takes_the_stage_order_a_finished_run_recorded(tmp_path):
    # C2 runs math RL (stage2_medium) before MOPD; the registry's C1-first
    # order would put MOPD last, so the finished run's summary decides.
    dirs = []
    for seed in range(2):
        w = tmp_path / f"s{seed}"
        order = ("sft", "stage2_medium", "mopd", "stage3_long")
        for stage in order:
            matrix.write(str(w / stage / "eval_matrix.json"), stage, {MATH: 0.5, CODE: 0.1})
        (w / report.SUMMARY_FILE).write_text(json.dumps({s: {} for s in order}))
        dirs.append(str(w))
    r = _cli(f"--workdirs={','.join(dirs)}", f"--out={tmp_path / 'out'}")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["stages"]) == ["sft", "stage2_medium", "mopd", "stage3_long"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workdirs={a}"], "--workdirs needs at least 2 workdirs"),
        (["--workdirs={a},{tmp}/missing", "--out={tmp}/o"], "--workdirs: '{tmp}/missing' does"),
        (["--workdirs={a},{a}"], "--workdirs needs --out=DIR"),
        (["--workdir={a}", "--workdirs={a},{a}", "--out={tmp}/o"], "not both"),
        (["--workdir={a}", "--out={tmp}/o"], "--out goes with --workdirs"),
        ([], "give --workdir=DIR (one run) or --workdirs"),
    ],
)
def test_cli_usage_errors_name_the_flag(tmp_path, args, message):
    a = tmp_path / "a"
    a.mkdir()
    fill = dict(a=a, tmp=tmp_path)
    r = _cli(*(x.format(**fill) for x in args))
    assert r.returncode != 0
    assert message.format(**fill) in r.stderr
