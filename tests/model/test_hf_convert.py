"""Hugging Face import/export checked against `transformers` (small random Qwen3 / Llama).

Logits of imported models match transformers in float32, exports reload in
transformers bit for bit, greedy decoding with our sampler matches
`generate(do_sample=False)`, and the CLI round-trips. Tests that need torch
and transformers (the `test` extras) are skipped when those cannot be imported.
"""

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
import safetensors.numpy

from nemocascade import convert
from nemocascade.model import hf_convert, presets, transformer
from nemocascade.rollout import decoding, sampling_methods
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import state as state_lib

VOCAB = 256
SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    # Wider than transformers' 0.02 so top-1 logits of the random model are
    # well separated and greedy decoding is not decided by rounding.
    initializer_range=0.1,
    rms_norm_eps=1e-6,
)
VARIANTS = ("qwen3_tied", "qwen3_untied", "llama_tied", "llama_untied")
TOKENS = np.random.RandomState(0).randint(0, VOCAB, (2, 11))


def _write_config(tmp_path, **fields) -> str:
    hf = {"model_type": "qwen3", "head_dim": 16, **SHAPE, **fields}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    return str(tmp_path)


# ---------------------------------------------------------------- config.json (no torch)


def test_qwen3_config_fields(tmp_path):
    d = _write_config(
        tmp_path,
        rope_theta=1e6,
        rope_scaling=None,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        torch_dtype="bfloat16",
        use_sliding_window=False,
        sliding_window=4096,
    )
    assert hf_convert.config_from_hf(d, remat_policy="full") == presets.ModelConfig(
        vocab_size=VOCAB,
        d_model=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        d_ff=128,
        rope_theta=1e6,
        rms_eps=1e-6,
        qk_norm=True,
        tie_embeddings=True,
        dtype="bfloat16",
        param_dtype="bfloat16",
        remat_policy="full",
        max_seq_len=4096,
    )


def test_published_qwen3_8b_config_is_the_preset(tmp_path):
    hub = dict(
        architectures=["Qwen3ForCausalLM"], attention_bias=False, head_dim=128,
        hidden_act="silu", hidden_size=4096, intermediate_size=12288,
        max_position_embeddings=40960, max_window_layers=36, model_type="qwen3",
        num_attention_heads=32, num_hidden_layers=36, num_key_value_heads=8,
        rms_norm_eps=1e-06, rope_scaling=None, rope_theta=1000000, sliding_window=None,
        tie_word_embeddings=False, torch_dtype="bfloat16", use_sliding_window=False,
        vocab_size=151936,
    )  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(hub))
    cfg = hf_convert.config_from_hf(str(tmp_path), param_dtype="float32", remat_policy="full")
    assert cfg == presets.get_preset("qwen3_8b")


def test_llama_config_fields(tmp_path):
    # transformers 5 spelling of the RoPE base; Llama's head_dim defaults to D / N.
    fields = dict(SHAPE, model_type="llama", num_attention_heads=8, num_key_value_heads=None)
    fields["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
    (tmp_path / "config.json").write_text(json.dumps(fields))
    cfg = hf_convert.config_from_hf(str(tmp_path))
    assert (cfg.head_dim, cfg.num_heads, cfg.num_kv_heads) == (8, 8, 8)
    assert (cfg.rope_theta, cfg.qk_norm, cfg.tie_embeddings) == (5e5, False, False)
    assert (cfg.dtype, cfg.param_dtype) == ("float32", "float32")


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"model_type": "qwen3_moe"}, "model_type"),
        ({"model_type": "mistral"}, "model_type"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope_parameters"),
        ({"attention_bias": True}, "attention_bias"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_experts": 8}, "num_experts"),
    ],
)
def test_unsupported_fields_name_field_and_file(tmp_path, fields, field):
    d = _write_config(tmp_path, **fields)
    with pytest.raises(ValueError, match=f"config.json: {field}=.* is not supported"):
        hf_convert.config_from_hf(d)


# ---------------------------------------------------------------- against transformers


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install .[test])")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    return torch, transformers


def _hf_model(hf, variant: str):
    torch, transformers = hf
    family, tie = variant.split("_")
    kwargs = dict(
        SHAPE,
        head_dim=16,
        tie_word_embeddings=tie == "tied",
        rope_theta=5000.0,  # transformers 5 turns it into rope_parameters
    )
    if family == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**kwargs)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs)).eval()


@pytest.fixture(scope="module")
def models(hf, tmp_path_factory):
    """variant -> (HF directory, torch model, reference logits on TOKENS)."""
    torch, _ = hf
    out = {}
    for variant in VARIANTS:
        model = _hf_model(hf, variant)
        d = str(tmp_path_factory.mktemp(variant))
        model.save_pretrained(d)
        with torch.no_grad():
            logits = model(torch.tensor(TOKENS)).logits.numpy()
        out[variant] = (d, model, logits)
    return out


def _logits(params, cfg, tokens=TOKENS):
    positions = np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape)
    hidden, _ = transformer.Transformer(cfg).apply({"params": params}, tokens, positions)
    return np.asarray(hidden @ transformer.unembedding(params, cfg))


def _hf_logits(hf, hf_dir, tokens=TOKENS):
    torch, transformers = hf
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        return model.eval()(torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_transformers(models, variant):
    hf_dir, _, ref = models[variant]
    cfg = hf_convert.config_from_hf(hf_dir)
    assert cfg.qk_norm == variant.startswith("qwen3")
    assert cfg.tie_embeddings == variant.endswith("_tied")
    assert cfg.rope_theta == 5000.0
    ours = _logits(hf_convert.import_params(hf_dir, cfg), cfg)
    assert np.abs(ref).max() > 0.1  # a real signal, not all-zero logits
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def test_sharded_checkpoint_onto_a_mesh_reads_each_slice_once(hf, models, tmp_path):
    _, model, ref = models["qwen3_untied"]
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    assert os.path.exists(tmp_path / hf_convert.INDEX_FILE)
    cfg = hf_convert.config_from_hf(str(tmp_path))
    mesh = mesh_lib.make_mesh((1, 4, 2))
    shardings = state_lib.param_shardings(cfg, mesh, rules_lib.get_rules("fsdp_tp"))
    stats = {}
    params = hf_convert.import_params(str(tmp_path), cfg, shardings=shardings, stats=stats)
    q = params["layers"]["attn"]["q_proj"]["kernel"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
    assert {s.data.shape for s in q.addressable_shards} == {(2, 16, 2, 16)}
    assert len({str(s.index) for s in q.addressable_shards}) == 8
    # Replicated slices are read once, so one host reads the checkpoint exactly once.
    assert stats["bytes_read"] == cfg.num_params * 4
    with jax.set_mesh(mesh):
        np.testing.assert_allclose(_logits(params, cfg), ref, atol=1e-4, rtol=0)
    cfg1 = dataclasses.replace(cfg, scan_layers=False)
    layer1 = hf_convert.import_params(str(tmp_path), cfg1)["layer_1"]["attn"]["q_proj"]["kernel"]
    np.testing.assert_array_equal(layer1, q[1])


@pytest.mark.parametrize("variant, shard", [("qwen3_tied", None), ("llama_untied", 30_000)])
def test_export_reloads_in_transformers(hf, models, tmp_path, variant, shard):
    hf_dir, model, ref = models[variant]
    cfg = hf_convert.config_from_hf(hf_dir, scan_layers=variant == "qwen3_tied")
    params = hf_convert.import_params(hf_dir, cfg)
    kwargs = {"max_shard_bytes": shard} if shard else {}
    files = hf_convert.export_hf(params, cfg, str(tmp_path), **kwargs)
    assert (len(files) > 1) == bool(shard)
    assert os.path.exists(tmp_path / hf_convert.INDEX_FILE) == bool(shard)
    written = {}
    for f in files:
        written.update(safetensors.numpy.load_file(str(tmp_path / f)))
    expected = {k: v.numpy() for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        del expected["lm_head.weight"]
    assert sorted(written) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    assert hf_convert.config_from_hf(str(tmp_path), scan_layers=cfg.scan_layers) == cfg
    np.testing.assert_array_equal(_hf_logits(hf, str(tmp_path)), ref)
    # Re-exporting into the same directory leaves no weight file of the first export.
    hf_convert.export_hf(params, cfg, str(tmp_path))
    assert sorted(f for f in os.listdir(tmp_path) if "safetensors" in f) == ["model.safetensors"]


def test_bfloat16_checkpoint_keeps_its_dtype(hf, models, tmp_path):
    torch, _ = hf
    _, model, _ = models["llama_tied"]
    bf16 = _hf_model(hf, "llama_tied")
    bf16.load_state_dict(model.state_dict())
    bf16.to(torch.bfloat16).save_pretrained(tmp_path)
    cfg = hf_convert.config_from_hf(str(tmp_path))
    assert (cfg.dtype, cfg.param_dtype) == ("bfloat16", "bfloat16")
    params = hf_convert.import_params(str(tmp_path), cfg)
    gate = params["layers"]["mlp"]["gate_proj"]["kernel"][0]
    assert gate.dtype == jax.numpy.bfloat16
    expected = model.model.layers[0].mlp.gate_proj.weight.detach().to(torch.bfloat16)
    expected = expected.float().numpy().T
    np.testing.assert_array_equal(np.asarray(gate, np.float32), expected)


@pytest.mark.parametrize("variant", ["qwen3_untied", "llama_tied"])
def test_greedy_decoding_matches_transformers_generate(hf, models, variant):
    torch, _ = hf
    hf_dir, model, _ = models[variant]
    cfg = hf_convert.config_from_hf(hf_dir, max_seq_len=64)
    params = hf_convert.import_params(hf_dir, cfg)
    prompts = [list(TOKENS[0, :5]), list(TOKENS[1, :9]), list(TOKENS[0])]
    # No stop: the end-of-sequence id lies outside the vocabulary.
    rollout = decoding.generate(
        params,
        cfg,
        prompts,
        method=sampling_methods.Greedy(),
        max_new_tokens=32,
        stop_ids=[VOCAB],
        rng=jax.random.key(0),
    )
    assert rollout.lengths.tolist() == [32, 32, 32]
    for prompt, ours in zip(prompts, rollout.completion_tokens, strict=True):
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=32,
                eos_token_id=VOCAB,
                pad_token_id=0,
            )
        theirs = out[0, len(prompt) :].tolist()
        assert len(set(theirs)) > 4  # a varied continuation, not one repeated token
        assert ours.tolist() == theirs


def test_missing_or_misshapen_tensors_fail_before_reading(models, tmp_path):
    hf_dir, _, _ = models["llama_untied"]
    tensors = safetensors.numpy.load_file(os.path.join(hf_dir, hf_convert.WEIGHTS_FILE))
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(config))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    safetensors.numpy.save_file(tensors, str(tmp_path / hf_convert.WEIGHTS_FILE))
    cfg = hf_convert.config_from_hf(str(tmp_path))
    with pytest.raises(KeyError, match="'model.layers.1.mlp.up_proj.weight' is missing"):
        hf_convert.import_params(str(tmp_path), cfg)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, intermediate_size=96)))
    with pytest.raises(ValueError, match=r"'model.layers.0.mlp.gate_proj.weight' has shape"):
        hf_convert.import_params(str(tmp_path), hf_convert.config_from_hf(str(tmp_path)))


# ---------------------------------------------------------------- the CLI


def test_cli_round_trip(hf, models, tmp_path):
    hf_dir = str(tmp_path / "hf_in")
    shutil.copytree(models["qwen3_untied"][0], hf_dir)
    with open(os.path.join(hf_dir, "tokenizer.json"), "w") as f:
        f.write('{"version": "1.0"}')
    work = tmp_path / "work"
    convert.main(["--from_hf", hf_dir, "--to", str(work / "hf_import")])
    stage = work / "hf_import"
    assert (stage / "export").is_dir() and (stage / "DONE").exists()
    saved = json.loads((stage / convert.MODEL_CONFIG_FILE).read_text())
    assert presets.ModelConfig(**saved) == hf_convert.config_from_hf(hf_dir)
    # A workdir resolves to its last finished stage.
    out = tmp_path / "hf_out"
    convert.main(["--from", str(work), "--to_hf", str(out), "--max_shard_size", "40KB"])
    assert (out / hf_convert.INDEX_FILE).exists() and (out / "tokenizer.json").exists()
    np.testing.assert_array_equal(_hf_logits(hf, str(out)), models["qwen3_untied"][2])


def test_cli_errors_name_the_flag(hf, models, tmp_path):
    hf_dir, _, _ = models["llama_tied"]

    def fails(args, match):
        with pytest.raises(convert.UsageError, match=match):
            convert.run(convert.parse_args(args))

    fails([], "either --from_hf with --to")
    fails(["--from_hf", hf_dir], "--from_hf and --to go together")
    fails(["--from_hf", hf_dir, "--to_hf", "x"], "either --from_hf")
    fails(["--from", str(tmp_path / "nope"), "--to_hf", "x"], "--from=.* is not a directory")
    fails(["--from", str(tmp_path), "--to_hf", "x"], "--from=.* is neither a stage dir")
    fails(["--from", hf_dir, "--to_hf", "x", "--max_shard_size", "lots"], "--max_shard_size")
    bad = tmp_path / "bad_hf"
    bad.mkdir()
    _write_config(bad, attention_bias=True)
    fails(["--from_hf", str(bad), "--to", "x"], "--from_hf=.*attention_bias")
    stage = tmp_path / "stage"
    convert.main(["--from_hf", hf_dir, "--to", str(stage)])
    os.remove(stage / convert.MODEL_CONFIG_FILE)
    fails(["--from", str(stage), "--to_hf", "x"], "no model_config.json.*--preset")
    fails(["--from", str(stage), "--to_hf", "x", "--preset", "tiny"], "--preset=tiny does not")


_WORKER = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
from nemocascade.model import hf_convert
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import state as state_lib
src, out = sys.argv[3], sys.argv[4]
cfg = hf_convert.config_from_hf(src)
mesh = mesh_lib.make_mesh((1, -1, 1))
shardings = state_lib.param_shardings(cfg, mesh, rules_lib.get_rules("fsdp"))
stats = {}
params = hf_convert.import_params(src, cfg, shardings=shardings, stats=stats)
addressable = params["embed"]["embedding"].is_fully_addressable
hf_convert.export_hf(params, cfg, out, max_shard_bytes=40_000)
print(json.dumps({"bytes_read": stats["bytes_read"], "fully_addressable": addressable}))
"""


@pytest.mark.slow
def test_two_processes_each_read_their_half_and_export_identically(tmp_path):
    """Multi-host path: 2 CPU processes x 4 devices, one fsdp mesh over all 8."""
    cfg = presets.ModelConfig(
        vocab_size=VOCAB, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=16, d_ff=128, qk_norm=True, tie_embeddings=False,
    )  # fmt: skip
    params = nn.meta.unbox(transformer.init_params(cfg, jax.random.key(1)))
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    files = hf_convert.export_hf(params, cfg, src, max_shard_bytes=40_000)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, address, str(i), src, out],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    total = cfg.num_params * 4
    for r in results:
        assert not r["fully_addressable"]
        # Half of every fsdp-sharded tensor, plus the replicated norm scales.
        assert total / 2 <= r["bytes_read"] < total / 2 + 4 * (2 * 64 * 2 + 64 + 2 * 16 * 2)
    assert sorted(os.listdir(out)) == sorted(os.listdir(src))
    for f in files:
        a = safetensors.numpy.load_file(os.path.join(src, f))
        b = safetensors.numpy.load_file(os.path.join(out, f))
        assert sorted(a) == sorted(b) and all((a[k] == b[k]).all() for k in a)
