"""MOPD teacher selection ranks stages by their benchmark suites of a domain when present."""

from nemocascade.evaluation import suites
from nemocascade.trainer import cascade


def test_suites_decide_over_the_task_world_cell():
    matrices = {
        "sft": {
            "code/thinking/pass@1": 0.9,
            "humaneval/thinking/pass@1": 0.2,
            "livecodebench/thinking/pass@1": 0.2,
            "math/thinking/pass@1": 0.1,
        },
        "stage3_long": {
            "code/thinking/pass@1": 0.1,
            "humaneval/thinking/pass@1": 0.5,
            "livecodebench/thinking/pass@1": 0.1,  # mean 0.3 beats sft's 0.2
            "humaneval/instruct/pass@1": 0.0,  # instruct does not count
            "math/thinking/pass@1": 0.3,
        },
    }
    assert suites.domain_keys(matrices["sft"], "code", "thinking") == [
        "humaneval/thinking/pass@1",
        "livecodebench/thinking/pass@1",
    ]
    chosen = cascade.select_teachers(("code", "math"), matrices)
    assert chosen == {"code": "stage3_long", "math": "stage3_long"}
    matrices["sft"]["gsm8k/thinking/pass@1"] = 0.9  # math now judged by GSM8K where present
    assert cascade.select_teachers(("math",), matrices) == {"math": "sft"}
