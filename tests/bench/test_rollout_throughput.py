"""`bench/rollout_throughput.py`: its length distribution, and its tiniest run end to end."""

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import rollout_throughput  # noqa: E402


def test_response_lengths_are_long_tailed_with_the_requested_mean():
    lengths = rollout_throughput.response_lengths(20_000, mean=128, cap=512, seed=0)
    assert lengths.min() >= 1 and lengths.max() == 512
    assert abs(lengths.mean() - 128) < 1
    assert np.median(lengths) < 0.7 * lengths.mean()  # long right tail


@pytest.mark.slow
def test_tiny_run_prints_one_json_line_with_both_engines(capsys):
    rollout_throughput.main(["--tiny"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    t, sp = out["throughput"], out["shared_prefill"]
    assert out["bench"] == "rollout_throughput" and t["same_tokens"]
    assert abs(t["useful_tokens"] / t["requests"] - t["mean_len"]) < 0.1
    assert t["continuous_tok_s"] > 0 and t["static_tok_s"] > 0 and t["continuous_chunks"] > 1
    assert sp["shared_prefilled_prompts"] == sp["prompts"]
    assert sp["separate_prefilled_prompts"] == sp["prompts"] * sp["group"]
