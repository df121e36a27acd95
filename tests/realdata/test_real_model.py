"""A real checkpoint end to end: convert → generate / SFT / RM / RLHF on records → export → HF.

The checkpoint is a small Qwen3 built with `transformers` (random weights, a
byte-level BPE with Qwen3's control tokens and Qwen3's chat template;
`qwen3_fixture`). Checked against `transformers` token for token: the
sampled completions in both modes, and the SFT loss mask against the tokens
`apply_chat_template` produces for the assistant turns.
"""

import json
import pathlib

import numpy as np
import pytest

from nemocascade import config as config_lib, convert, generate, metrics as metrics_lib
from nemocascade.data import chat_template, pipelines, records, text
from nemocascade.trainer import dispatch
from tests.realdata import qwen3_fixture

torch = pytest.importorskip("torch", reason="torch is not installed (pip install .[test])")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
PROMPTS = ["Compute 12 + 30.", "What is the capital of France?"]
CONVERSATIONS = [
    [
        SYSTEM,
        {"role": "user", "content": "Compute 12 + 30."},
        {"role": "assistant", "content": "42.", "reasoning_content": "12 + 30 = 42."},
        {"role": "user", "content": "And 12 + 31?"},
        {"role": "assistant", "content": "<think>\n12 + 31 = 43.\n</think>\n\nIt is 43."},
    ],
    [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ],
    [
        SYSTEM,
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello there friend."},
        {"role": "user", "content": "Again, in lowercase."},
        {"role": "assistant", "content": "hello there friend."},
    ],
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """(HF dir, converted dir)."""
    root = tmp_path_factory.mktemp("qwen3")
    hf_dir = qwen3_fixture.build(root / "hf")
    out = root / "converted"
    convert.main([f"--from_hf={hf_dir}", f"--to={out}"])
    return hf_dir, out


def _write_jsonl(path: pathlib.Path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _config(name: str, converted, workdir, **sections) -> config_lib.Config:
    cd = __import__(f"configs.{name}", fromlist=["get_config"]).get_config("tiny")
    cd.model.preset = "checkpoint"
    cd.init.init_from = str(converted)
    cd.train.update(
        batch_size=8,
        num_microbatches=1,
        seq_len=128,
        log_every=1,
        checkpoint_every=100,
        progress=False,
    )
    cd.eval.update(num_per_domain=0)
    for section, values in sections.items():
        cd[section].update(values)
    return config_lib.from_config_dict(cd)


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize("mode", ["thinking", "instruct"])
def test_generate_matches_transformers_token_for_token(ckpt, tmp_path, mode):
    hf_dir, converted = ckpt
    hf_tok = qwen3_fixture.hf_tokenizer(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    stops = [hf_tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|im_start|>")]
    stops.append(hf_tok.convert_tokens_to_ids("<|endoftext|>"))
    src = _write_jsonl(
        tmp_path / "in.jsonl",
        [{"messages": [SYSTEM, {"role": "user", "content": p}]} for p in PROMPTS],
    )
    out = generate.run(
        generate.parse_args(
            [
                f"--workdir={converted}",
                f"--mode={mode}",
                "--temperature=0",
                "--max_new_tokens=24",
                f"--input={src}",
                f"--output={tmp_path / 'out.jsonl'}",
            ]
        )
    )
    varied = 0
    for record, prompt in zip(out, PROMPTS, strict=True):
        messages = [SYSTEM, {"role": "user", "content": prompt}]
        ids = qwen3_fixture.chat_ids(
            hf_tok, messages, add_generation_prompt=True, enable_thinking=mode == "thinking"
        )
        with torch.no_grad():
            full = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False,
                max_new_tokens=24,
                eos_token_id=stops,
                pad_token_id=stops[-1],
            )
        theirs = full[0, len(ids) :].tolist()
        assert record["token_ids"] == theirs
        assert record["completion"].endswith(hf_tok.decode([t for t in theirs if t not in stops]))
        varied += len(set(theirs)) > 4
    assert varied  # a real continuation, not one repeated token


def test_generate_refuses_the_builtin_tokenizer_on_a_converted_model(ckpt):
    _, converted = ckpt
    with pytest.raises(generate.UsageError, match="carries the tokenizer tokenizer.json sha256"):
        generate.run(
            generate.parse_args([f"--workdir={converted}", "--tokenizer=builtin", "--prompt=hi"])
        )


# ---------------------------------------------------------------- SFT on messages


def _expected_mask(hf_tok, messages) -> tuple[list[int], list[int]]:
    """Token ids of the conversation and 1 on what each assistant turn generates.

    The assistant's part, located in the text `apply_chat_template` renders: after
    the generation prompt, up to and including `<|im_end|>`; a thinking turn's
    block is part of it, an instruct turn's empty block (in the prompt) is not.
    """
    text_ = hf_tok.apply_chat_template(messages, tokenize=False)
    ids = qwen3_fixture.chat_ids(hf_tok, messages)
    enc = hf_tok(text_, add_special_tokens=False, return_offsets_mapping=True)
    assert enc["input_ids"] == ids
    spans, pos = [], 0
    for n, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        content = m["content"].split("</think>")[-1].lstrip("\n")
        head = "<|im_start|>assistant\n"
        start = text_.index(head, pos) + len(head)
        if text_.startswith("<think>\n\n</think>\n\n", start) and n == len(messages) - 1:
            start += len("<think>\n\n</think>\n\n")  # empty block: the instruct prompt's
        end = text_.index(content + "<|im_end|>", start) + len(content) + len("<|im_end|>")
        spans.append((start, end))
        pos = end
    mask = [int(any(s <= a < e for s, e in spans)) for a, _ in enc["offset_mapping"]]
    return ids, mask


def test_sft_mask_is_exactly_the_assistant_tokens(ckpt):
    hf_dir, converted = ckpt
    hf_tok = qwen3_fixture.hf_tokenizer(hf_dir)
    tok, source = text.load_tokenizer("", str(converted))
    template = text.load_template("", source, tok=tok)
    for messages in CONVERSATIONS:
        normalized = records.sft_messages({"messages": messages}, "x:1")
        ids, mask = chat_template.render_messages(tok, normalized, template)
        want_ids, want_mask = _expected_mask(hf_tok, messages)
        assert ids == want_ids
        assert mask == want_mask, [
            (hf_tok.decode([i]), a, b) for i, a, b in zip(ids, mask, want_mask, strict=True)
        ]
        assert sum(mask) > 0
        last_ids, last_mask = chat_template.render_messages(tok, normalized, template, "last")
        assert last_ids == ids and 0 < sum(last_mask) <= sum(mask)


def test_sft_on_messages_then_export_loads_in_transformers(ckpt, tmp_path):
    hf_dir, converted = ckpt
    data = _write_jsonl(tmp_path / "sft.jsonl", [{"messages": c} for c in CONVERSATIONS] * 4)
    held_out = _write_jsonl(tmp_path / "held_out.jsonl", [{"messages": CONVERSATIONS[1]}])
    cfg = _config(
        "sft",
        converted,
        tmp_path,
        train=dict(steps=3, eval_every=100),
        data=dict(files=(data,), eval_files=(held_out,), eval_examples=4),
    )
    work = tmp_path / "work"
    dispatch.run(cfg, str(work))
    rows = metrics_lib.read(str(work / "sft" / "metrics.jsonl"))
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert np.isfinite([r["eval_loss"] for r in rows if "eval_loss" in r]).all()
    assert (work / "sft" / "tokenizer.json").exists() and (work / "sft" / "config.json").exists()
    out = tmp_path / "hf_out"
    convert.main([f"--from={work / 'sft'}", f"--to_hf={out}"])
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.vocab_size == cfg.model.vocab_size
    reloaded = qwen3_fixture.hf_tokenizer(out)
    assert reloaded.chat_template == qwen3_fixture.CHAT_TEMPLATE


# ---------------------------------------------------------------- RM and RLHF from records


def test_rm_then_rlhf_from_jsonl_and_parquet(ckpt, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, converted = ckpt
    pairs = [
        {"prompt": p, "chosen": "A clear, correct answer.", "rejected": "no"} for p in PROMPTS
    ] + [
        {
            "messages": CONVERSATIONS[0][:2],
            "chosen": {"role": "assistant", "content": "42."},
            "rejected": "41",
        }
    ]
    train = _write_jsonl(tmp_path / "pairs.jsonl", pairs * 4)
    held = _write_jsonl(tmp_path / "held.jsonl", pairs)
    work = tmp_path / "work"
    rm_cfg = _config(
        "rm",
        converted,
        tmp_path,
        train=dict(steps=10, eval_every=100),
        data=dict(files=(train,), eval_files=(held,)),
    )
    dispatch.run(rm_cfg, str(work))
    rm_rows = metrics_lib.read(str(work / "rm" / "metrics.jsonl"))
    assert [r["step"] for r in rm_rows if "loss" in r] == list(range(1, 11))

    prompts = tmp_path / "chat.parquet"
    table = [{"prompt": p, "domain": "chat"} for p in PROMPTS * 4]
    pq.write_table(pa.Table.from_pylist(table), str(prompts))
    rl_cfg = _config(
        "rlhf",
        converted,
        tmp_path,
        train=dict(steps=2, batch_size=8),
        data=dict(files=(str(prompts),)),
        rl=dict(
            prompts_per_step=2,
            group_size=4,
            max_new_tokens=12,
            eval_num=0,
            rm_from=str(work / "rm"),
            dynamic_filter="none",
            overlong="none",
            mode="instruct",
        ),
    )
    dispatch.run(rl_cfg, str(work))
    rows = [r for r in metrics_lib.read(str(work / "rlhf" / "metrics.jsonl")) if "reward_mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    # RM scores of sampled answers: real values (not the 0 of a missing reward) and a step.
    assert all(np.isfinite(r["reward_mean"]) and r["reward_mean"] != 0 for r in rows)
    assert all(r["grad_norm"] > 0 for r in rows)


# ---------------------------------------------------------------- fail closed


def test_builtin_tokenizer_on_a_converted_checkpoint_fails_naming_both(ckpt, tmp_path):
    _, converted = ckpt
    data = _write_jsonl(tmp_path / "sft.jsonl", [{"messages": CONVERSATIONS[1]}])
    cfg = _config("sft", converted, tmp_path, data=dict(files=(data,), tokenizer="builtin"))
    with pytest.raises(config_lib.ConfigError) as e:
        dispatch.run(cfg, str(tmp_path / "work"))
    message = str(e.value)
    assert "config.init.init_from" in message and "tokenizer.json sha256:" in message
    assert "SentencePiece" in message and "config.data.tokenizer='builtin'" in message
    assert not (tmp_path / "work" / "sft" / "checkpoints").exists()  # nothing ran


def test_a_record_missing_a_field_fails_naming_file_line_field(ckpt, tmp_path):
    _, converted = ckpt
    rows = [{"messages": CONVERSATIONS[1]}, {"messages": [{"role": "user"}]}]
    data = _write_jsonl(tmp_path / "sft.jsonl", rows)
    cfg = _config("sft", converted, tmp_path, data=dict(files=(data,)))
    with pytest.raises(
        records.RecordError, match=r"sft\.jsonl:2: field 'messages\[0\]\.content': missing"
    ):
        dispatch.run(cfg, str(tmp_path / "work"))
    pairs = _write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "Hi", "chosen": "Hello"}])
    with pytest.raises(records.RecordError, match=r"pairs\.jsonl:1: field 'rejected': missing"):
        pipelines.preference_loader(None, files=[pairs], seq_len=32, batch_size=1)


def test_vocab_larger_than_the_embedding(ckpt, tmp_path):
    _, converted = ckpt
    data = _write_jsonl(tmp_path / "sft.jsonl", [{"messages": CONVERSATIONS[1]}])
    cfg = _config("sft", converted, tmp_path, data=dict(files=(data,)), model=dict(vocab_size=64))
    with pytest.raises(config_lib.ConfigError, match=r"config\.model\.vocab_size=64 is smaller"):
        dispatch.run(cfg, str(tmp_path / "w1"))


def test_real_model_variants_need_data_and_a_checkpoint(tmp_path):
    cd = __import__("configs.sft", fromlist=["get_config"]).get_config("8b")
    with pytest.raises(config_lib.ConfigError, match=r"config\.data\.files is empty"):
        dispatch.run(config_lib.from_config_dict(cd), str(tmp_path))
    cd.data.files = ("/data/train.jsonl",)
    with pytest.raises(config_lib.ConfigError, match=r"config\.init\.init_from is empty"):
        dispatch.run(config_lib.from_config_dict(cd), str(tmp_path))


def test_math_rl_from_records_with_latex_answers(ckpt, tmp_path):
    _, converted = ckpt
    rows = [
        {"prompt": "Compute 1/2 + 1/4.", "domain": "math", "answer": "\\frac{3}{4}"},
        {
            "messages": [SYSTEM, {"role": "user", "content": "What is 6 x 7?"}],
            "domain": "math",
            "answer": "42",
        },
    ]
    data = _write_jsonl(tmp_path / "math.jsonl", rows * 4)
    rl = dict(
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=12,
        eval_num=0,
        dynamic_filter="none",
        overlong="none",
        verifier_workers=0,
        entropy_coef=0.01,
    )
    cfg = _config(
        "stage2_medium",
        converted,
        tmp_path,
        train=dict(steps=2, batch_size=8),
        data=dict(files=(data,)),
        rl=dict(rl, curriculum=[]),
    )
    dispatch.run(cfg, str(tmp_path / "work"))
    rows_ = metrics_lib.read(str(tmp_path / "work" / "stage2_medium" / "metrics.jsonl"))
    steps = [r for r in rows_ if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["grad_norm"] > 0 for r in steps)
    # A record without its verification payload stops the run naming file, line and field.
    bad = _write_jsonl(tmp_path / "bad.jsonl", [rows[0], {"prompt": "2+2?", "domain": "math"}])
    cfg = _config(
        "stage2_medium",
        converted,
        tmp_path,
        train=dict(steps=2, batch_size=8),
        data=dict(files=(bad,)),
        rl=dict(rl, curriculum=[]),
    )
    with pytest.raises(records.RecordError, match=r"bad\.jsonl:2: .*'answer'"):
        dispatch.run(cfg, str(tmp_path / "work2"))
