"""notebooks/loss_ablation.ipynb runs at TOY size and its runs show the loss settings' effects.

The notebook is executed in a fresh kernel (as `pytest --nbmake` would, via
nbclient) with its outputs written to a temporary directory; the checks then
read the runs' metrics. At toy size no rollout earns a reward, so the checks
are the ones that hold without one: the clip range never binds on-policy,
k3's gradient vanishes at the reference while k1's does not, and batch
filtering drops every all-equal group.
"""

import json
import os

import pytest

nbclient = pytest.importorskip("nbclient", reason="notebook tests need the 'test' extras")
nbformat = pytest.importorskip("nbformat")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "loss_ablation.ipynb")
SETTINGS = (
    "baseline",
    "seq_mean_token_mean",
    "kl_k1",
    "kl_k3",
    "clip_high_0.28",
    "dynamic_filter_batch",
)


def _steps(workdir, name):
    path = os.path.join(workdir, name, "stage1_short", "metrics.jsonl")
    with open(path) as f:
        return [r for r in map(json.loads, f) if "reward_mean" in r]


def test_committed_notebook_has_no_outputs_and_a_parameters_cell():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])
    assert "NEMOCASCADE_NOTEBOOK_SIZE" in code[0].source


def test_toy_loss_ablation(tmp_path, monkeypatch):
    workdir = tmp_path / "ablation"
    monkeypatch.setenv("NEMOCASCADE_NOTEBOOK_SIZE", "toy")
    monkeypatch.setenv("NEMOCASCADE_NOTEBOOK_WORKDIR", str(workdir))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("NEMOCASCADE_SFT_DIR", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()

    assert (workdir / "sft" / "DONE").exists()
    runs = {name: _steps(workdir, name) for name in SETTINGS}
    for name, steps in runs.items():
        assert (workdir / name / "stage1_short" / "DONE").exists(), name
        assert [r["step"] for r in steps] == [1, 2], name
    base, clip = runs["baseline"], runs["clip_high_0.28"]
    for key in ("loss", "entropy", "grad_norm"):
        assert [r[key] for r in clip] == pytest.approx([r[key] for r in base], rel=1e-6), key
    # At step 1 the policy is the reference: k3's gradient is 0 there, k1's is not.
    g_base = base[0]["grad_norm"]
    assert runs["kl_k3"][0]["grad_norm"] == pytest.approx(g_base, rel=1e-3)
    assert runs["kl_k1"][0]["grad_norm"] > 10 * g_base
    # Batch filtering drops exactly the groups whose rewards are all equal.
    filtered = runs["dynamic_filter_batch"]
    assert any(r["groups_filtered"] > 0 for r in filtered)
    for r in filtered:
        assert r["groups_filtered"] == r["groups_zero_std"]
        assert r["seqs_in_loss"] == pytest.approx(1.0 - r["groups_filtered"])
    assert all(r["groups_filtered"] == 0.0 for r in base)
    assert (workdir / "loss_ablation.png").stat().st_size > 1000
    table = [
        o for c in nb.cells for o in c.get("outputs", []) if "text/markdown" in o.get("data", {})
    ]
    assert "| clip_high_0.28 | done | 2 |" in table[0]["data"]["text/markdown"]
