"""Each stage records how it ran: config.json (round-trips), model_config.json, run.json."""

import json

from nemocascade import config as config_lib
from nemocascade.sharding import mesh as mesh_lib
from nemocascade.trainer.stages import common


def _config(name: str) -> config_lib.Config:
    cd = __import__(f"configs.{name}", fromlist=["get_config"]).get_config("tiny")
    cd.rl.teachers = "math=/runs/sft,if=/runs/stage1_short" if name == "mopd" else ""
    return config_lib.from_config_dict(cd)


def test_config_json_round_trips_and_run_json_says_where(tmp_path):
    for name in ("sft", "stage2_medium", "rm", "mopd"):
        cfg = _config(name)
        d = tmp_path / name
        d.mkdir()
        common.write_run_files(cfg, str(d), mesh_lib.make_mesh(cfg.mesh.shape))
        saved = json.loads((d / common.CONFIG_FILE).read_text())
        assert config_lib.from_dict(saved) == cfg
        model = json.loads((d / config_lib.MODEL_CONFIG_FILE).read_text())
        assert config_lib.checkpoint_model(str(d)) == cfg.model == cfg.model.__class__(**model)
        run = json.loads((d / common.RUN_FILE).read_text())
        assert run["num_devices"] == 8 and run["platform"] == "cpu"
        assert run["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
        assert run["versions"]["jax"] and run["argv"]
