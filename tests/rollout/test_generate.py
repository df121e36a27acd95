"""The generate CLI: stage resolution, model shape from the checkpoint, end-to-end output."""

import json
import os
import time

import jax
import pytest

from nemocascade import checkpointing, generate
from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.model import presets
from nemocascade.rollout import decoding, modes, sampling_methods
from tests.rollout import helpers

CFG = helpers.TOY_MODEL_1K


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    params = helpers.random_params(CFG, head_scale=5.0)
    checkpointing.export_params(str(root / "sft"), params, {"stage": "sft"})
    return str(root), params


def _args(workdir, *extra):
    return generate.parse_args([f"--workdir={workdir}", *extra])


def test_stage_defaults_to_last_finished_policy_stage(tmp_path):
    for name in ("sft", "stage1_short", "rm"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "DONE").write_text("{}")
        time.sleep(0.01)  # distinct modification times
    os.makedirs(tmp_path / "stage2_medium")  # started, not finished
    assert generate.resolve_stage(str(tmp_path), None) == "stage1_short"
    with pytest.raises(generate.UsageError, match="--stage=stage2_medium"):
        generate.resolve_stage(str(tmp_path), "stage2_medium")


@pytest.mark.parametrize(
    "extra, match",
    [
        (("--prompt=hi",), "--workdir=/nonexistent"),
        (("--prompt=hi", "--input=x.jsonl"), "exactly one of --prompt and --input"),
    ],
)
def test_usage_errors_name_the_flag(extra, match):
    with pytest.raises(generate.UsageError, match=match):
        generate.run(_args("/nonexistent", *extra))


def test_main_exits_with_the_message(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--workdir=.* has no finished stage"):
        generate.main([f"--workdir={tmp_path}", "--prompt=hi"])


def test_model_config_is_read_from_the_checkpoint(workdir, tmp_path):
    root, _ = workdir
    cfg = generate.infer_model_config(os.path.join(root, "sft", "export"))
    assert cfg == presets.ModelConfig(
        **{k: getattr(CFG, k) for k in ("vocab_size", "d_model", "num_layers", "num_heads")},
        num_kv_heads=CFG.num_kv_heads,
        head_dim=CFG.head_dim,
        d_ff=CFG.d_ff,
        qk_norm=True,
        tie_embeddings=False,
    )
    with pytest.raises(generate.UsageError, match="--preset=tiny does not match"):
        generate.infer_model_config(os.path.join(root, "sft", "export"), "tiny")


def test_prompt_and_jsonl_end_to_end_match_the_sampler(workdir, tmp_path, capsys):
    root, params = workdir
    out = generate.run(
        _args(root, "--prompt=What is 2+3?", "--temperature=0", "--max_new_tokens=8")
    )
    assert len(out) == 1 and out[0]["num_tokens"] <= 8
    # Same greedy tokens as calling the sampler directly on the same params.
    tok = tokenizer_lib.Tokenizer.load()
    mode = modes.get("thinking", tok)
    ids = mode.prompt(tok, [{"role": "user", "content": "What is 2+3?"}])
    direct = decoding.generate(
        params,
        CFG,
        [ids],
        method=sampling_methods.Greedy(),
        max_new_tokens=8,
        rng=jax.random.key(0),
        **modes.sampler_kwargs([mode]),
    )
    expected = mode.parser(direct.completion_tokens[0, : direct.lengths[0]])["completion"]
    assert out[0]["completion"] == expected and out[0]["truncated"] == bool(direct.truncated[0])

    records = [
        {"prompt": "Say hi."},
        {"prompt": "ignored", "messages": [{"role": "user", "content": "Count to 3."}], "id": 7},
    ]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out" / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    generate.main(
        [
            f"--workdir={root}",
            "--stage=sft",
            "--mode=instruct",
            f"--input={src}",
            f"--output={dst}",
            "--max_new_tokens=6",
            "--thinking_budget=2",
        ]
    )
    lines = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r.get("id") for r in lines] == [None, 7]
    for r in lines:
        assert {"completion", "thinking", "answer", "num_tokens", "truncated"} <= set(r)
        assert 1 <= r["num_tokens"] <= 6 and isinstance(r["truncated"], bool)
    assert all(r["thinking"] is None for r in lines)  # instruct: no think block


def test_preset_shapes_resolve_to_the_preset(tmp_path):
    tiny = presets.get_preset("tiny")
    checkpointing.export_params(str(tmp_path / "sft"), helpers.random_params(tiny))
    assert generate.infer_model_config(str(tmp_path / "sft" / "export")) == tiny


def test_flagfile_and_one_line_flag_errors(workdir, tmp_path, capsys):
    root, _ = workdir
    flagfile = tmp_path / "gen.flags"
    flagfile.write_text(f"--workdir={root}\n--mode=instruct\n--temperature=0\n--prompt=Hi\n")
    args = generate.parse_args([f"--flagfile={flagfile}", "--max_new_tokens=4"])
    assert (args.workdir, args.mode, args.temperature, args.max_new_tokens) == (
        root,
        "instruct",
        0.0,
        4,
    )
    with pytest.raises(SystemExit, match=r"generate: .*--mode"):
        generate.main([f"--workdir={root}", "--mode=fast", "--prompt=hi"])
    with pytest.raises(SystemExit, match=r"generate: --workdir is required"):
        generate.main(["--prompt=hi"])
