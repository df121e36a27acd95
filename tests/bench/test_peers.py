"""`bench/peers.py` at its tiniest: the project alone always, with TRL and Tunix when installed.

The peers live in their own environment (the `peers` extra pins another
transformers): set `PEERS_PYTHON` to its interpreter, or install them here.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)

import peers  # noqa: E402
import peers_common  # noqa: E402


def _peers_python() -> str | None:
    if os.environ.get("PEERS_PYTHON"):
        return os.environ["PEERS_PYTHON"]
    if all(importlib.util.find_spec(m) for m in ("trl", "tunix")):
        return sys.executable
    return None


def _run(tmp_path, *flags) -> dict:
    cmd = [sys.executable, os.path.join(BENCH, "peers.py"), "--tiny", f"--workdir={tmp_path}"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(cmd + list(flags), capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_summarize_steps_takes_medians_from_the_first_timed_step():
    rows = [
        {"step": 1, "step_s": 9.0, "generation_s": 5.0, "train_s": 4.0, "tokens": 10},
        {"step": 2, "step_s": 2.0, "generation_s": 1.0, "train_s": 1.0, "tokens": 20},
        {"step": 3, "step_s": 4.0, "generation_s": 3.0, "train_s": 1.0, "tokens": 40},
        {"step": 4, "step_s": 3.0, "generation_s": 2.0, "train_s": 1.0, "tokens": 30},
    ]
    s = peers_common.summarize_steps(rows, timed_from=2)
    assert s["timed_steps"] == [2, 3, 4]
    assert (s["step_s"], s["generation_s"], s["tokens"]) == (3.0, 2.0, 30)
    assert s["step_tokens_per_s"] == 10.0 and s["gen_tokens_per_s"] == 15.0
    assert peers_common.summarize_steps(rows[:1], timed_from=3)["timed_steps"] == [1]


def test_ratios_are_peer_time_over_ours():
    spec = peers.make_spec(peers.parse_args(["--tiny"]))
    ours = {"decode": {"2": {"tok_s": 300.0}}, "grpo": {"step_s": 2.0, "train_s": 1.0}}
    ours["grpo"].update(generation_s=1.0, step_tokens_per_s=50.0)
    peer = {"decode": {"2": {"tok_s": 100.0}}, "grpo": {"step_s": 5.0, "train_s": 4.0}}
    peer["grpo"].update(generation_s=1.0, step_tokens_per_s=20.0)
    r = peers.ratios({"nemocascade": ours, "trl": peer}, spec)
    assert r["decode_vs_transformers"] == 3.0
    assert r["grpo_step_vs_trl"] == 2.5 and r["grpo_train_vs_trl"] == 4.0
    assert r["grpo_generation_vs_trl"] == 1.0 and r["grpo_tokens_per_s_vs_trl"] == 2.5


def test_nemocascade_alone(tmp_path):
    summary = _run(tmp_path, "--frameworks=nemocascade")
    assert summary["versions"].keys() == {"nemocascade"}
    grpo = summary["grpo"]["nemocascade"]
    assert grpo["timed_steps"] == [1] and grpo["step_s"] > grpo["generation_s"] > 0
    assert 0 < grpo["tokens"] <= 2 * 2 * 8  # prompts x group x new tokens
    assert summary["ratios"] == {}


@pytest.mark.skipif(_peers_python() is None, reason="TRL / Tunix not installed (PEERS_PYTHON)")
def test_with_both_peers(tmp_path):
    summary = _run(tmp_path, f"--peers_python={_peers_python()}")
    assert summary["skipped"] == {}
    assert summary["versions"]["trl"] and summary["versions"]["tunix"]
    assert summary["same_weights_ok"] and summary["trl_tokenizer_same_ids"]
    for peer in ("trl", "tunix"):
        assert summary["same_weights"][peer]["greedy_identical_rows"] == {"2": 2}
    for key in ("grpo_step_vs_trl", "grpo_step_vs_tunix", "decode_vs_transformers"):
        assert summary["ratios"][key] > 0
    assert summary["ratios"]["decode_vs_tunix"] > 0
