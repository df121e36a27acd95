"""The cascade report shows benchmark-suite cells (`eval.suites`) and flags their drops."""

from nemocascade.evaluation import matrix, report


def test_benchmark_table_and_forgetting(tmp_path):
    stages = ("sft", "stage1_short", "stage2_medium")
    values = {
        "sft": {"humaneval/thinking/pass@1": 0.40, "gsm8k/instruct/pass@1": 0.50},
        "stage1_short": {"humaneval/thinking/pass@1": 0.42, "gsm8k/instruct/pass@1": 0.55},
        "stage2_medium": {"humaneval/thinking/pass@1": 0.30, "gsm8k/instruct/pass@1": 0.70},
    }
    for stage in stages:
        metrics = {"math/thinking/pass@1": 0.5, "math/thinking/mean_len": 10.0, **values[stage]}
        metrics["humaneval/thinking/mean_len"] = 99.0  # not a headline cell
        matrix.write(str(tmp_path / stage / "eval_matrix.json"), stage, metrics)
    table = report.collect(str(tmp_path), stages)
    assert report.benchmark_keys(table) == ["gsm8k/instruct/pass@1", "humaneval/thinking/pass@1"]
    assert report.forgetting(str(tmp_path), stages, 0.05) == [
        "humaneval/thinking/pass@1 dropped from 0.420 (after stage1_short) to 0.300 after "
        "stage2_medium (tolerance 0.050)"
    ]
    with open(report.write(str(tmp_path), stages, tolerance=0.05)) as f:
        text = f.read()
    assert "| stage | gsm8k/instruct | humaneval/thinking |" in text
    assert "| stage2_medium | 70.0 | 30.0 |" in text
