"""Workdirs and data given as URIs (`gs://…`) stay URIs: nothing turns them into local paths.

`etils.epath.testing.mock_epath` serves every URI scheme from the local disk
(under the current directory), so the project's own file handling — record
files, tokenizer copies, run files, DONE markers — runs here as on a bucket.
Array data goes through orbax/tensorstore's own GCS driver, which cannot be
mocked offline: checkpoint round trips are tested on local paths.
"""

import json

from etils import epath
from etils.epath import testing as epath_testing

from nemocascade import checkpointing, config as config_lib
from nemocascade.data import pipelines, records
from nemocascade.model import presets
from nemocascade.trainer import stage_setup
from tests.data import test_text


def test_uri_paths_round_trip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local_tok = test_text._tok_dir(tmp_path / "tok")
    with epath_testing.mock_epath():
        work = "gs://bucket/run"
        stage = stage_setup.stage_dir(work, "sft")
        assert stage == "gs://bucket/run/sft" and checkpointing.absolute(work) == work
        data = epath.Path("gs://bucket/data/sft.jsonl")
        data.parent.mkdir(parents=True)
        conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        data.write_text(json.dumps({"messages": conversation}) + "\n")
        tok_uri = epath.Path("gs://bucket/tok")
        tok_uri.mkdir(parents=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (tok_uri / name).write_text((local_tok / name).read_text())

        source = records.index(str(data), "sft")
        assert records.load(source, 0, "sft")[1]["content"] == "Yo"
        cfg = config_lib.Config(
            stage="sft",
            model=presets.get_preset("tiny"),
            data=config_lib.DataConfig(files=(str(data),), tokenizer=str(tok_uri)),
        )
        tok, template, src = stage_setup.text_for(cfg, stage)
        assert src == str(tok_uri)
        assert epath.Path(stage, "tokenizer.json").exists()
        stage_setup.write_run_files(cfg, stage)
        saved = json.loads(epath.Path(stage, "config.json").read_text())
        assert saved["data"]["files"] == [str(data)]
        loader = pipelines.sft_loader(
            tok, files=[str(data)], template=template, seq_len=64, batch_size=1, num_epochs=1
        )
        assert next(loader)["loss_mask"].sum() > 0
        assert not checkpointing.is_done(stage)
        epath.Path(stage, checkpointing.DONE_FILE).write_text("{}")
        assert checkpointing.is_done(stage)
    assert (tmp_path / "gs:" / "bucket" / "run" / "sft" / "config.json").exists()
