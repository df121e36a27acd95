"""Benchmark suites (`eval.suites`) in a stage: its eval matrix and its forgetting guard."""

import dataclasses
import json

from nemocascade import config as config_lib
from nemocascade.trainer.stages import rl
from tests.trainer import test_rl_stage


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_suites_reach_the_matrix_and_the_guard_watches_untrained_ones(tmp_path):
    gsm = _write_jsonl(tmp_path / "gsm.jsonl", [{"question": "1+1?", "answer": "#### 2"}] * 2)
    ife = _write_jsonl(
        tmp_path / "ife.jsonl",
        [{"prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}],
    )
    cfg = test_rl_stage.toy_rl_config("stage2_medium")  # trains math
    cfg = config_lib.validate(
        dataclasses.replace(
            cfg,
            train=dataclasses.replace(cfg.train, steps=1, eval_every=1),
            eval=dataclasses.replace(
                cfg.eval,
                domains=("math",),
                modes=("instruct",),
                num_per_domain=2,
                guard_tolerance=0.5,
                suites=(f"gsm8k:{gsm}", f"ifeval:{ife}"),
            ),
        )
    )
    rl.run(cfg, str(tmp_path / "run"))
    stage = tmp_path / "run" / "stage2_medium"
    baseline = json.loads((stage / "guard_baseline.json").read_text())
    assert set(baseline) == {"ifeval/instruct/pass@1"}  # gsm8k is math, which the stage trains
    metrics = json.loads((stage / "eval_matrix.json").read_text())["metrics"]
    for key in ("gsm8k/instruct/pass@1", "ifeval/instruct/pass@1", "math/instruct/pass@1"):
        assert 0.0 <= metrics[key] <= 1.0
    assert "ifeval/instruct/inst_level_loose_acc" in metrics
