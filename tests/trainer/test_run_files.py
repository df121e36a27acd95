"""Each stage records how it ran: config.json (round-trips), model_config.json, run.json."""

import dataclasses
import json

from nemocascade import config as config_lib
from nemocascade.sharding import mesh as mesh_lib
from nemocascade.trainer import stage_setup


def _config(name: str) -> config_lib.Config:
    cd = __import__(f"configs.{name}", fromlist=["get_config"]).get_config("tiny")
    cd.rl.teachers = "math=/runs/sft,if=/runs/stage1_short" if name == "mopd" else ""
    return config_lib.from_config_dict(cd)


def test_config_json_round_trips_and_run_json_says_where(tmp_path):
    for name in ("sft", "stage2_medium", "rm", "mopd"):
        cfg = _config(name)
        d = tmp_path / name
        d.mkdir()
        stage_setup.write_run_files(cfg, str(d), mesh_lib.make_mesh(cfg.mesh.shape))
        saved = json.loads((d / stage_setup.CONFIG_FILE).read_text())
        assert config_lib.from_dict(saved) == cfg
        model = json.loads((d / config_lib.MODEL_CONFIG_FILE).read_text())
        assert config_lib.checkpoint_model(str(d)) == cfg.model == cfg.model.__class__(**model)
        run = json.loads((d / stage_setup.RUN_FILE).read_text())
        assert run["num_devices"] == 8 and run["platform"] == "cpu"
        assert run["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
        assert run["versions"]["jax"] and run["argv"]


def test_wandb_offline_run_writes_its_files(tmp_path, monkeypatch):
    wandb = __import__("pytest").importorskip("wandb", reason="wandb is not installed")
    from nemocascade import metrics as metrics_lib

    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _config("sft")
    train = dataclasses.replace(cfg.train, wandb_project="nc-test", wandb_mode="offline")
    cfg = dataclasses.replace(cfg, train=train)
    writer = metrics_lib.Writer(str(tmp_path), wandb=stage_setup.wandb_settings(cfg))
    writer.write(1, {"loss": 2.5})
    writer.write(2, {"loss": 2.0})
    writer.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list((tmp_path / "wandb").iterdir())
    assert wandb.run is None
