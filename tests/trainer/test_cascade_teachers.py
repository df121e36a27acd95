"""MOPD teacher selection in the cascade: best thinking-mode score per domain, ties to later;
with `rl.teacher_per_mode`, each mode's own best stage."""

import os

import pytest

from nemocascade import config as config_lib
from nemocascade.evaluation import matrix
from nemocascade.trainer import cascade


def test_select_teachers_best_then_later_on_ties():
    matrices = {
        "sft": {"math/thinking/pass@1": 0.6, "if/thinking/pass@1": 0.2, "chat/thinking/gold": 0.7},
        "stage1_short": {
            "math/thinking/pass@1": 0.5,
            "if/thinking/pass@1": 0.9,
            "chat/thinking/pass@1": 0.9,  # chat is ranked by gold, not pass@1
            "chat/thinking/gold": 0.4,
            "code/instruct/pass@1": 1.0,  # instruct scores do not count
        },
        "stage2_medium": {
            "math/thinking/pass@1": 0.6,  # ties sft: the later stage wins
            "if/thinking/pass@1": 0.3,
            "code/thinking/pass@1": 0.1,
        },
    }
    chosen = cascade.select_teachers(("math", "if", "chat", "code"), matrices)
    assert chosen == {
        "math": "stage2_medium",
        "if": "stage1_short",
        "chat": "sft",
        "code": "stage2_medium",
    }


def test_select_teachers_per_mode_splits_only_domains_whose_modes_disagree():
    matrices = {
        "sft": {"swe/thinking/pass@1": 0.3, "swe/instruct/pass@1": 0.5},
        "stage3_long": {"swe/thinking/pass@1": 0.2, "swe/instruct/pass@1": 0.6},
        "stage4_swe": {"swe/thinking/pass@1": 0.7, "swe/instruct/pass@1": 0.4},
    }
    for m in matrices.values():
        m.update({"math/thinking/pass@1": 0.5, "math/instruct/pass@1": 0.0})
    modes = ("thinking", "instruct")
    chosen = cascade.select_teachers(("swe", "math"), matrices, modes)
    # math ties everywhere in both modes: the latest stage, one key for both.
    assert chosen == {
        "swe/thinking": "stage4_swe",
        "swe/instruct": "stage3_long",
        "math": "stage4_swe",
    }
    # Without modes: the thinking score alone, as before.
    assert cascade.select_teachers(("swe",), matrices) == {"swe": "stage4_swe"}


def test_select_teachers_without_a_candidate_names_the_field():
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.teachers.*code/thinking"):
        cascade.select_teachers(("code",), {"sft": {"math/thinking/pass@1": 1.0}})


def _finished_stage(workdir, name, metrics, done=True):
    os.makedirs(os.path.join(workdir, name), exist_ok=True)
    matrix.write(os.path.join(workdir, name, "eval_matrix.json"), name, metrics)
    if done:
        open(os.path.join(workdir, name, "DONE"), "w").close()


def test_stage_config_fills_mopd_teachers_from_earlier_stages(tmp_path):
    workdir = str(tmp_path)
    _finished_stage(workdir, "sft", {"math/thinking/pass@1": 0.8, "if/thinking/pass@1": 0.1})
    _finished_stage(
        workdir, "stage1_short", {"math/thinking/pass@1": 0.2, "if/thinking/pass@1": 0.7}
    )
    # Better everywhere but not finished (no DONE): never a teacher.
    _finished_stage(
        workdir, "stage2_medium", {"math/thinking/pass@1": 1.0, "if/thinking/pass@1": 1.0}, False
    )
    overrides = {"rl.domains": ("math", "if"), "rl.domain_weights": ()}
    cfg = cascade.stage_config(
        "mopd",
        "tiny",
        overrides,
        os.path.join(workdir, "stage2_medium"),
        workdir,
        earlier=("sft", "stage1_short", "stage2_medium"),
    )
    assert config_lib.parse_teachers(cfg.rl.teachers) == {
        "math": os.path.join(workdir, "sft"),
        "if": os.path.join(workdir, "stage1_short"),
    }
    explicit = cascade.stage_config(
        "mopd", "tiny", {**overrides, "rl.teachers": "math=/m,if=/i"}, "", workdir, earlier=()
    )
    assert explicit.rl.teachers == "math=/m,if=/i"
