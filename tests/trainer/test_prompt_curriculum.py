"""The prompt side of the RL curriculum and length-grouped prompt windows."""

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest

from configs import stage4_swe
from nemocascade import config as config_lib, metrics as metrics_lib
from nemocascade.data import chat_template, pipelines, records, tokenizer as tokenizer_lib
from nemocascade.model import presets
from nemocascade.rollout import decoding
from nemocascade.tasks import patch_format
from nemocascade.trainer.onpolicy import driver, parts, prompt_curriculum, prompt_stream
from tests.trainer import test_driver, test_rl_stage


def _records(tmp_path, lengths, name="rl.jsonl"):
    """Math RL records whose prompt i has `lengths[i]` characters."""
    rows = [
        {"prompt": f"q{i:03d}" + "x" * (n - 4), "domain": "math", "answer": str(i)}
        for i, n in enumerate(lengths)
    ]
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _source(loader, **kw):
    return prompt_curriculum.PromptSource(loader, length=lambda ex: len(ex.prompt), **kw)


def _take(source, n):
    return [next(source)[0]["example"] for _ in range(n)]


def test_phase_switches_prompt_limits_at_the_sub_stage_boundary():
    rl = dataclasses.replace(
        config_lib.RLConfig(),
        curriculum=(
            config_lib.CurriculumStage(3, 64, 1.0, max_prompt_tokens=16, levels=(1, 2)),
            config_lib.CurriculumStage(2, 64, 1.0, max_prompt_tokens=24),
        ),
    )
    limits = [parts.phase_at(rl, s).limits for s in range(1, 8)]
    assert [lim.max_prompt_tokens for lim in limits] == [16, 16, 16, 24, 24, 24, 24]
    assert [lim.levels for lim in limits] == [(1, 2)] * 3 + [()] * 4
    assert parts.phase_at(config_lib.RLConfig(), 5).limits == prompt_curriculum.Limits()


def test_long_prompts_are_skipped_and_counted(tmp_path):
    lengths = [8, 30, 9, 40, 10, 12, 50, 11]
    path = _records(tmp_path, lengths)
    loader = pipelines.rl_prompts(batch_size=1, files=[path], seed=3, num_epochs=2)
    source = _source(loader)
    source.set_limits(prompt_curriculum.Limits(max_prompt_tokens=12))
    served = _take(source, 10)  # the five short prompts of each epoch
    assert sorted(len(e.prompt) for e in served) == [8, 8, 9, 9, 10, 10, 11, 11, 12, 12]
    with pytest.raises(StopIteration):
        next(source)
    assert source.skipped_long == 6 and source.metrics()["prompts_skipped_long"] == 6
    # A widened limit serves them all.
    loader = pipelines.rl_prompts(batch_size=1, files=[path], seed=3, num_epochs=1)
    source = _source(loader)
    source.set_limits(prompt_curriculum.Limits(max_prompt_tokens=64))
    assert sorted(len(e.prompt) for e in _take(source, 8)) == sorted(lengths)
    assert source.skipped_long == 0


def test_levels_are_restricted_per_sub_stage():
    loader = pipelines.rl_prompts(batch_size=1, domains=("swe",), num_examples=30, seed=1)
    source = prompt_curriculum.PromptSource(loader)
    source.set_limits(prompt_curriculum.Limits(levels=(1, 2)))
    early = _take(source, 12)
    assert {e.difficulty for e in early} <= {1, 2} and source.skipped_level > 0
    source.set_limits(prompt_curriculum.Limits(levels=(1, 2, 3)))
    later = _take(source, 30)
    assert 3 in {e.difficulty for e in later}


def test_no_prompt_passing_the_limits_names_the_fields(tmp_path):
    loader = pipelines.rl_prompts(batch_size=1, files=[_records(tmp_path, [20, 30])])
    source = _source(loader)
    source.set_limits(prompt_curriculum.Limits(max_prompt_tokens=5))
    with pytest.raises(RuntimeError, match=r"config.rl.curriculum\[i\].max_prompt_tokens"):
        next(source)


def test_length_grouping_serves_each_prompt_once_in_similar_length_steps(tmp_path):
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(8, 400, size=48)]
    loader = pipelines.rl_prompts(batch_size=1, files=[_records(tmp_path, lengths)], seed=0)
    source = _source(loader, window=16, group=4, seed=7)
    served = _take(source, 48)
    assert Counter(e.uid for e in served) == Counter({e.uid: 1 for e in served})
    assert len(served) == 48  # the whole epoch, each prompt once
    # Each step of 4 is 4 neighbours in its window's length order.
    for w in range(3):
        window = sorted(len(e.prompt) for e in served[16 * w : 16 * (w + 1)])
        ranks = [window[4 * g : 4 * g + 4] for g in range(4)]
        steps = [sorted(len(e.prompt) for e in served[16 * w + 4 * s :][:4]) for s in range(4)]
        assert sorted(steps) == ranks


def test_length_grouping_lowers_the_padded_prompt_tokens(tmp_path):
    """The sampler pads a step to the power of two above its longest prompt."""
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in np.exp(rng.uniform(np.log(300), np.log(9000), size=256))]
    path = _records(tmp_path, lengths)

    def padded(window):
        loader = pipelines.rl_prompts(batch_size=1, files=[path], seed=0)
        source = _source(loader, window=window, group=8)
        steps = [_take(source, 8) for _ in range(32)]
        return sum(8 * decoding.prompt_bucket(max(len(e.prompt) for e in s)) for s in steps)

    plain, grouped = padded(0), padded(64)
    assert grouped < 0.6 * plain, (plain, grouped)


@pytest.mark.parametrize("cut", [0, 5, 16, 23])
def test_length_grouping_resumes_exactly(tmp_path, cut):
    lengths = [int(n) for n in np.random.default_rng(2).integers(5, 200, size=40)]
    path = _records(tmp_path, lengths)

    def stream():
        loader = pipelines.rl_prompts(batch_size=1, files=[path], seed=5)
        source = _source(loader, window=16, group=4, seed=11)
        source.set_limits(prompt_curriculum.Limits(max_prompt_tokens=150))
        return prompt_stream.PromptStream(
            source, 4, epoch_filter=False, resample_easy=0, resample_hard=0, seed=0
        )

    whole = stream()
    expected = [e.uid for _ in range(12) for e in whole.next_batch()]
    first = stream()
    for _ in range(cut // 4):
        first.next_batch()
    for _ in range(cut % 4):  # a position inside a step: the source itself
        next(first.source)
    state = json.loads(json.dumps(first.get_state()))
    resumed = stream()
    resumed.set_state(state)
    rest = [next(resumed.source)[0]["example"].uid for _ in range(len(expected) - cut)]
    assert rest == expected[cut:]
    assert resumed.source.skipped_long == whole.source.skipped_long


def _swe_record(i: int, extra_files: int) -> dict:
    """A record in the released SWE RL format (C1 [HF-SWE]); more files, longer prompt."""
    body = "def f(x):\n    return x + 1\n" * 3
    files = {f"pkg/mod{k}.py": body for k in range(extra_files)}
    files["pkg/calc.py"] = "def area(w, h):\n    return w + h\n"
    fixed = {**files, "pkg/calc.py": "def area(w, h):\n    return w * h\n"}
    shown = "".join(f"### {p}\n{c}\n" for p, c in files.items())
    return {
        "source": "swe-fixer",
        "instance_id": f"calc__calc-{i}",
        "prompt": f"Issue {i}: area(2, 3) returns 5, expected 6.\n\n{shown}",
        "original_prompt": "area(2, 3) returns 5",
        "golden_patch": patch_format.make_patch(files, fixed),
        "relevant_file_contents": files,
    }


def test_released_swe_records_flow_through_the_curriculum(tmp_path):
    rows = [_swe_record(i, i % 4) for i in range(8)]
    path = tmp_path / "swe.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = tokenizer_lib.Tokenizer.load()
    template = chat_template.DEFAULT
    base = config_lib.Config(stage="stage4_swe", model=presets.PRESETS["tiny"])
    probe = dataclasses.replace(base, rl=dataclasses.replace(base.rl, mode="thinking"))
    length = parts.prompt_length(probe, tok, template)
    short = sorted(length(records.rl_example(r, "probe")) for r in rows)[3]  # half the prompts fit
    rl = dataclasses.replace(
        probe.rl,
        domains=("swe",),
        prompts_per_step=2,
        length_group_window=4,
        max_new_tokens=16,
        curriculum=(
            config_lib.CurriculumStage(2, 16, 1.0, max_prompt_tokens=short),
            config_lib.CurriculumStage(2, 16, 1.0),
        ),
    )
    cfg = dataclasses.replace(probe, rl=rl, data=dataclasses.replace(base.data, files=(str(path),)))
    config_lib.validate(cfg)
    stream = parts.make_stream(cfg, {}, tok, template)
    stream.source.set_limits(parts.phase_at(rl, 1).limits)
    first = stream.next_batch() + stream.next_batch()  # the four short ones of epoch 0
    shorts = {r["instance_id"] for r in rows if length(records.rl_example(r, "p")) <= short}
    assert all(e.domain == "swe" for e in first)
    assert {e.meta["instance_id"] for e in first} == shorts
    skipped = stream.source.skipped_long
    assert 0 < skipped <= 4
    stream.source.set_limits(parts.phase_at(rl, 3).limits)
    rest = [e for _ in range(6) for e in stream.next_batch()]
    assert max(length(e) for e in rest) > short
    assert stream.source.skipped_long == skipped


def test_stage4_swe_8b_runs_the_input_context_curriculum():
    cfg = config_lib.from_config_dict(stage4_swe.get_config("8b"))
    limits = [parts.phase_at(cfg.rl, s).limits.max_prompt_tokens for s in (1, 30, 31, 60)]
    assert limits == [16_384, 16_384, 24_576, 24_576]
    assert cfg.rl.length_group_window % cfg.rl.prompts_per_step == 0
    assert cfg.rl.length_group_window > 0
    big = config_lib.from_config_dict(stage4_swe.get_config("14b"))
    assert parts.phase_at(big.rl, 120).limits.max_prompt_tokens == 32_768


@pytest.mark.parametrize(
    "rl, message",
    [
        (dict(length_group_window=12), r"config.rl.length_group_window=12 must be 0"),
        (
            dict(curriculum=(config_lib.CurriculumStage(2, 16, 1.0, max_prompt_tokens=-1),)),
            r"config.rl.curriculum\[0\].max_prompt_tokens must be >= 0",
        ),
        (
            dict(curriculum=(config_lib.CurriculumStage(2, 16, 1.0, levels=(1, 1)),)),
            r"config.rl.curriculum\[0\].levels=\(1, 1\)",
        ),
        (
            dict(
                domains=("swe",),
                curriculum=(config_lib.CurriculumStage(2, 16, 1.0, levels=(9,)),),
            ),
            r"config.rl.curriculum\[0\].levels=\(9,\) leaves no swe prompt",
        ),
        (
            dict(curriculum=(config_lib.CurriculumStage(2, 16, 1.0, max_prompt_tokens=10**6),)),
            r"config.rl.curriculum\[0\].max_prompt_tokens=1000000 \+ max_new_tokens=16 exceed",
        ),
    ],
)
def test_bad_prompt_curriculum_values_name_the_field(rl, message):
    base = config_lib.Config(stage="stage4_swe", model=presets.PRESETS["tiny"])
    cfg = dataclasses.replace(base, rl=dataclasses.replace(base.rl, **rl))
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(cfg)


class _Recording(test_driver.Fake):
    """The driver's fake algorithm, keeping the examples of each step."""

    seen: list = []

    def __init__(self, *args):  # not in Fake.instances, which test_driver counts
        self.calls, self.closed = [], False

    def prepare(self, step, examples, rollouts, phase, draw):
        _Recording.seen.append((step, phase.limits, list(examples)))
        return super().prepare(step, examples, rollouts, phase, draw)


def test_the_driver_applies_each_sub_stage_and_logs_the_skips(tmp_path):
    cd = stage4_swe.get_config("tiny")
    cd.model.update(test_rl_stage.TOY_MODEL)
    cd.train.update(
        steps=3, batch_size=8, num_microbatches=1, log_every=1, checkpoint_every=100, progress=False
    )
    cd.rl.update(prompts_per_step=2, group_size=4, eval_num=2, num_prompts=16, max_new_tokens=8)
    cd.rl.update(verifier_workers=0, dynamic_filter="none", overlong="none")
    cd.rl.length_group_window = 4
    cd.rl.curriculum = [
        {"steps": 2, "max_new_tokens": 8, "temperature": 1.0, "levels": [1, 2]},
        {"steps": 1, "max_new_tokens": 8, "temperature": 1.0, "levels": [3]},
    ]
    cd.eval.update(num_per_domain=0, max_new_tokens=8, thinking_budget=4, batch_size=8)
    cfg = config_lib.from_config_dict(cd)
    _Recording.seen = []
    driver.run(cfg, str(tmp_path), _Recording)
    assert [(s, lim.levels) for s, lim, _ in _Recording.seen] == [
        (1, (1, 2)),
        (2, (1, 2)),
        (3, (3,)),
    ]
    levels = [{e.difficulty for e in examples} for _, _, examples in _Recording.seen]
    assert levels[0] | levels[1] <= {1, 2} and levels[2] == {3}
    rows = metrics_lib.read(str(tmp_path / "stage4_swe" / "metrics.jsonl"))
    skips = [r["prompts_skipped_level"] for r in rows if "fake_rows" in r]
    assert skips == sorted(skips) and skips[-1] > 0
    assert all(r["prompts_skipped_long"] == 0 for r in rows if "fake_rows" in r)


def test_a_bare_loader_state_resumes_and_a_changed_window_is_refused(tmp_path):
    path = _records(tmp_path, [10 + 7 * i for i in range(12)])

    def loader():
        return pipelines.rl_prompts(batch_size=1, files=[path], seed=2)

    old = loader()
    for _ in range(5):
        next(old)
    source = _source(loader())  # a checkpoint written before the source existed
    source.set_state(old.get_state())
    assert next(source)[0]["example"].uid == next(old)[0]["example"].uid
    grouped = _source(loader(), window=8, group=4)
    next(grouped)
    state = grouped.get_state()
    with pytest.raises(ValueError, match="config.rl.length_group_window"):
        _source(loader(), window=4, group=4).set_state(state)
