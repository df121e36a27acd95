"""`bench/profile_step.py`: op names map to model parts, and a tiny profile adds up."""

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)

import profile_step  # noqa: E402


def test_op_names_map_to_model_parts():
    part = profile_step._part
    fwd = "jit(step)/jvp(Transformer)/layer_2/"
    assert part(fwd + "attn/q_proj/btd,dnh->btnh/dot_general") == "attention q/k/v/o projections"
    assert part(fwd + "attn/k_norm/mul") == "attention q/k norms"
    assert part(fwd + "attn/bnts,bnsh->bnth/dot_general") == "attention core (scores, softmax, PV)"
    assert part(fwd + "mlp/btd,df->btf/dot_general") == "MLP (SwiGLU)"
    assert part(fwd + "mlp_norm/mul") == "RMSNorms, residual adds"
    assert part("jit(step)/jvp(Transformer)/final_norm/mul") == "embedding, final norm"
    assert part("jit(step)/adam/mul") == "log-prob, loss, optimizer, other"


def test_tiny_profile_has_forward_and_backward_parts(tmp_path):
    # Batch 8: the tests' 8 fake devices split it.
    out = profile_step.main(["--batch=8", "--seq_len=32", "--steps=1", f"--trace_dir={tmp_path}"])
    parts = out["parts_ms"]
    for name in ("attention core (scores, softmax, PV)", "MLP (SwiGLU)"):
        assert parts[name] > 0 and parts[name + " [bwd]"] > 0
    assert abs(sum(parts.values()) - out["thread_ms"]) < 0.1 * len(parts)
    assert out["tokens"] == 256 and out["step_ms"] > 0 and out["xla_gflop"] > 0
