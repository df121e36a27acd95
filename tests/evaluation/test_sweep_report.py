"""Sweep comparison table: final values, matrix headlines, columns, markdown, files written."""

import json
import math

from nemocascade.evaluation import matrix, sweep_report

RECORDS = [
    {"step": 0, "eval/math/thinking/pass@1": 0.25, "eval/math/thinking/mean_len": 90.0},
    {"step": 1, "reward_mean": 0.1, "pass_rate": 0.1, "entropy": 1.5, "loss": 0.3},
    {"step": 2, "reward_mean": 0.4, "pass_rate": 0.3, "entropy": 1.2, "loss": 0.2},
    {"step": 2, "eval/math/thinking/pass@1": 0.5, "eval/math/thinking/mean_len": 80.0},
]


def test_final_metrics_keep_the_last_value_of_table_and_headline_keys():
    assert sweep_report.final_metrics(RECORDS) == {
        "step": 2.0,
        "reward_mean": 0.4,
        "pass_rate": 0.3,
        "entropy": 1.2,
        "eval/math/thinking/pass@1": 0.5,
    }
    assert sweep_report.final_metrics([]) == {}


def test_matrix_headlines_use_gold_for_chat():
    got = sweep_report.matrix_headlines(
        {"math/thinking/pass@1": 0.3, "chat/instruct/gold": 0.9, "math/thinking/mean_len": 50.0}
    )
    assert got == {"matrix/math/thinking": 0.3, "matrix/chat/instruct": 0.9}


def test_curve_and_plot_key():
    assert sweep_report.curve(RECORDS, "reward_mean") == [(1, 0.1), (2, 0.4)]
    assert sweep_report.plot_key({"reward_mean": {"a": [(1, 0.1)]}, "loss": {}}) == "reward_mean"
    assert sweep_report.plot_key({"reward_mean": {"a": []}, "loss": {"a": [(1, 2.0)]}}) == "loss"
    assert sweep_report.plot_key({"reward_mean": {}, "loss": {}}) is None


def test_markdown_rows_and_columns():
    rows = [
        {
            "name": "lr-1e-06",
            "status": "done",
            "values": {"optim.lr": 1e-6},
            "metrics": {"step": 2.0, "reward_mean": 0.4, "matrix/math/thinking": 0.25},
        },
        {"name": "lr-3e-06", "status": "failed", "values": {"optim.lr": 3e-6}, "metrics": {}},
    ]
    cols = sweep_report.columns(rows)
    assert cols == ["reward_mean", "matrix/math/thinking"]
    lines = sweep_report.markdown(rows, ["optim.lr"], cols)
    assert lines == [
        "| run | status | optim.lr | step | reward_mean | matrix/math/thinking |",
        "|---|---|---|---|---|---|",
        "| lr-1e-06 | done | 1e-06 | 2 | 0.4 | 0.25 |",
        "| lr-3e-06 | failed | 3e-06 | – | – | – |",
    ]


def test_write_reads_run_dirs_and_writes_table_json_and_plot(tmp_path):
    stage_dirs = {}
    for i, name in enumerate(["kl-k1", "kl-k3"]):
        d = tmp_path / name / "stage1_short"
        d.mkdir(parents=True)
        recs = [
            {**r, "reward_mean": r["reward_mean"] + i} if "reward_mean" in r else r for r in RECORDS
        ]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        matrix.write(
            str(d / "eval_matrix.json"), "stage1_short", {"if/instruct/pass@1": 0.5 + i / 4}
        )
        stage_dirs[name] = str(d)
    rows = [
        {"name": "kl-k1", "status": "done", "values": {"rl.kl_kind": "k1"}},
        {"name": "kl-k3", "status": "skipped", "values": {"rl.kl_kind": "k3"}},
    ]
    meta = {"config": "configs/stage1_short.py:tiny", "axes": {"rl.kl_kind": ["k1", "k3"]}}
    meta["overrides"] = {"rl.kl_coef": 0.01}
    path = sweep_report.write(str(tmp_path), meta, rows, stage_dirs)
    with open(path) as f:
        text = f.read()
    assert "Fixed overrides: `rl.kl_coef=0.01`" in text
    assert "| kl-k1 | done | k1 | 2 | 0.4 | 0.3 | 1.2 | 0.5 | 0.5 |" in text
    assert "| kl-k3 | skipped | k3 | 2 | 1.4 | 0.3 | 1.2 | 0.5 | 0.75 |" in text
    assert "![sweep_curves.png](sweep_curves.png)" in text
    assert (tmp_path / "sweep_curves.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["axes"] == {"rl.kl_kind": ["k1", "k3"]}
    assert math.isclose(saved["runs"][1]["metrics"]["reward_mean"], 1.4)
    assert saved["runs"][0]["metrics"]["matrix/if/instruct"] == 0.5
