"""Pod-size compile checks: `.lower()` on abstract meshes, no device memory allocated.

The SFT train step of the Qwen3-8B/14B presets is traced and lowered for TPU
on abstract meshes of 64 and 256 devices with the paper's SFT batch (256
sequences, micro-batched), and the per-device bytes of params + optimizer
state are checked against a budget: 16 GiB, a fraction of one H200 (141 GB)
or TPU v5p (95 GB) chip that leaves room for activations and the KV cache.

The RL step (GRPO loss of `rl.make_loss_fn`) is lowered the same way with the
paper's RL batch (128 prompts x 8 rollouts = 1024 sequences, T = 8192,
micro-batched), and so is the sampler (prefill + `while_loop` decode) on the
same batch with params in the trainer's layout, as the RL stage calls it. Its
KV cache is sized by abstract shapes: params + cache per device must stay
under 32 GiB at the lowered shape, and the cache at the stage-1 response
length (prompt 1024 + 8192 new tokens, computed, not lowered) under 48 GiB,
so that either leaves half of a v5p chip (95 GB) to activations.
"""

import dataclasses
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from nemocascade import config as config_lib
from nemocascade.kernels.fused_logprob import api as fused_logprob_api
from nemocascade.model import kv_cache, presets, transformer
from nemocascade.rollout import decoding, sampling_methods
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import optimizer, state as state_lib, step as step_lib
from nemocascade.trainer.stages import rl, sft

STATE_BUDGET_BYTES = 16 * 2**30
DECODE_BUDGET_BYTES = 32 * 2**30
FULL_CACHE_BUDGET_BYTES = 48 * 2**30
RL_SEQS, RL_SEQ_LEN, RL_MICRO = 128 * 8, 8192, 16
PROMPT_BUCKET, DECODE_NEW_TOKENS, STAGE1_NEW_TOKENS = 1024, 16, 8192
MESHES = pytest.mark.parametrize("mesh_shape", [(1, 16, 4), (1, 64, 4)], ids=["64dev", "256dev"])
PRESETS = pytest.mark.parametrize("preset", ["qwen3_8b", "qwen3_14b"])
BATCH_KEYS = ("inputs", "targets", "loss_mask", "positions", "segment_ids")


def per_device_bytes(abstract_tree) -> int:
    total = 0
    for leaf in jax.tree.leaves(abstract_tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total


def lower_sft_step(
    preset: str | presets.ModelConfig,
    mesh_shape,
    batch: int,
    seq_len: int,
    micro: int,
    rules="fsdp_tp",
    platform="tpu",
    **kernels,
):
    """`kernels`: optional `attention_impl` (model) and `logprob_impl` (train).

    `preset`: a preset name or a model config. `platform` "tpu": lowered for
    TPU on an abstract mesh; "cpu": lowered on a mesh of this process'
    devices, ready to compile.
    """
    model = _model(preset, kernels)
    train = config_lib.TrainConfig(**_pick(kernels, "logprob_impl"))
    cfg = config_lib.Config(stage="sft", model=model, train=train)
    mesh = _mesh(mesh_shape, platform)
    rules = rules_lib.get_rules(rules)
    tx = optimizer.make(cfg.optim, 1000)
    abstract, shardings = state_lib.abstract_state(model, tx, mesh, rules)
    bs = rules_lib.batch_sharding(mesh, rules, 2)
    batch_spec = {
        k: jax.ShapeDtypeStruct((batch, seq_len), jnp.int32, sharding=bs) for k in BATCH_KEYS
    }
    step = step_lib.make_train_step(
        sft.make_loss_fn(cfg),
        tx,
        num_microbatches=micro,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
    )
    return _lower(step, abstract, batch_spec, mesh, platform), abstract


def _model(preset: str | presets.ModelConfig, kernels: dict) -> presets.ModelConfig:
    fields = _pick(kernels, "attention_impl", "mlp_seq_chunk")
    if isinstance(preset, presets.ModelConfig):
        return dataclasses.replace(preset, **fields)
    return presets.get_preset(preset, **fields)


def _mesh(mesh_shape, platform: str):
    if platform == "tpu":
        return mesh_lib.make_abstract_mesh(mesh_shape)
    return mesh_lib.make_mesh(mesh_shape)


def _lower(step, abstract, batch_spec, mesh, platform: str):
    rng = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    if platform == "tpu":
        with jax.sharding.use_abstract_mesh(mesh):
            traced = step.jitted.trace(abstract, batch_spec, rng)
            return traced.lower(lowering_platforms=("tpu",))
    with jax.set_mesh(mesh):
        return step.jitted.lower(abstract, batch_spec, rng)


@pytest.mark.parametrize("preset", ["qwen3_8b", "qwen3_14b"])
@pytest.mark.parametrize("mesh_shape", [(1, 16, 4), (1, 64, 4)], ids=["64dev", "256dev"])
def test_sft_step_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, abstract = lower_sft_step(preset, mesh_shape, batch=256, seq_len=4096, micro=16)
    text = lowered.as_text()
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in text
    state_bytes = per_device_bytes(abstract)
    print(f"{preset} on {math.prod(mesh_shape)} devices: {state_bytes / 2**30:.2f} GiB/device")
    assert 0 < state_bytes < STATE_BUDGET_BYTES
    # Parameters really are sharded: per-device bytes well below a replica.
    replica = presets.get_preset(preset).num_params * 4 * 3  # f32 params + Adam mu, nu
    assert state_bytes < replica / (math.prod(mesh_shape) / 2)


def _sharded(shape, dtype, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def _pick(kw: dict, *names: str) -> dict:
    return {name: kw[name] for name in names if name in kw}


def lower_rl_step(
    preset: str,
    mesh_shape,
    seqs=RL_SEQS,
    seq_len=RL_SEQ_LEN,
    micro=RL_MICRO,
    rules="fsdp_tp",
    platform="tpu",
    **kernels,
):
    model = _model(preset, kernels)
    train = config_lib.TrainConfig(**_pick(kernels, "logprob_impl"))
    cfg = config_lib.Config(stage="stage1_short", model=model, train=train)
    mesh = _mesh(mesh_shape, platform)
    rules = rules_lib.get_rules(rules)
    tx = optimizer.make(cfg.optim, 1000)
    abstract, shardings = state_lib.abstract_state(model, tx, mesh, rules)
    bs2, bs1 = rules_lib.batch_sharding(mesh, rules, 2), rules_lib.batch_sharding(mesh, rules, 1)
    shape = (seqs, seq_len)
    batch_spec = {k: _sharded(shape, jnp.int32, bs2) for k in BATCH_KEYS}
    batch_spec["sampler_logprobs"] = _sharded(shape, jnp.float32, bs2)
    batch_spec["advantages"] = _sharded((seqs,), jnp.float32, bs1)
    step = step_lib.make_train_step(
        rl.make_loss_fn(cfg, temperature=0.6),
        tx,
        num_microbatches=micro,
        mesh=mesh,
        rules=rules,
        state_shardings=shardings,
    )
    return _lower(step, abstract, batch_spec, mesh, platform), abstract


@PRESETS
@MESHES
def test_rl_step_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, abstract = lower_rl_step(preset, mesh_shape)
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in lowered.as_text()
    state_bytes = per_device_bytes(abstract)
    print(f"RL {preset} on {math.prod(mesh_shape)} devices: {state_bytes / 2**30:.2f} GiB/device")
    assert 0 < state_bytes < STATE_BUDGET_BYTES


def abstract_cache(model, batch: int, length: int, mesh, rules):
    shapes = jax.eval_shape(lambda: transformer.init_cache(model, batch, length))
    return kv_cache.map_with_axes(
        lambda a, names: _sharded(
            a.shape, a.dtype, NamedSharding(mesh, rules_lib.spec(names, rules))
        ),
        shapes,
    )


def lower_sampler(preset: str, mesh_shape):
    """`decoding._decode_jit` as `decoding.generate` calls it, on abstract arrays."""
    model = presets.get_preset(preset)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    decode_rules = rules_lib.get_rules("decode")
    # The RL stage samples with the trainer's params in place (no weight transfer).
    tx = optimizer.make(config_lib.Config(stage="stage1_short", model=model).optim, 1000)
    params = state_lib.abstract_state(model, tx, mesh, rules_lib.get_rules("fsdp_tp"))[0].params
    b, p = RL_SEQS, PROMPT_BUCKET
    cache = abstract_cache(model, b, p + DECODE_NEW_TOKENS, mesh, decode_rules)
    rows, row = (
        rules_lib.batch_sharding(mesh, decode_rules, 2),
        rules_lib.batch_sharding(mesh, decode_rules, 1),
    )
    # (prompt, pad, live, thinking budget, answer budget): `decoding._HOST_ARGS`.
    host = (
        _sharded((b, p), jnp.int32, rows),
        _sharded((b,), jnp.int32, row),
        _sharded((b,), jnp.bool_, row),
        _sharded((b,), jnp.int32, row),
        _sharded((b,), jnp.int32, row),
    )
    rep = NamedSharding(mesh, PartitionSpec())
    ids = {
        "stop": _sharded((decoding.MAX_STOP_IDS,), jnp.int32, rep),
        "close": _sharded((decoding.MAX_THINK_CLOSE_IDS,), jnp.int32, rep),
        "num_close": _sharded((), jnp.int32, rep),
        "end": _sharded((), jnp.int32, rep),
    }
    static = decoding._Static(
        model_cfg=model,
        method=sampling_methods.Sample(temperature=0.6, top_k=20, top_p=0.95),
        max_new_tokens=DECODE_NEW_TOKENS,
        pad_id=0,
        rules=decode_rules,
    )
    rng = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    with jax.sharding.use_abstract_mesh(mesh):
        traced = decoding._decode_jit.trace(params, cache, *host, ids, rng, static=static)
        lowered = traced.lower(lowering_platforms=("tpu",))
    return lowered, params, cache


@PRESETS
@MESHES
def test_sampler_lowers_on_pod_mesh(preset, mesh_shape):
    lowered, params, cache = lower_sampler(preset, mesh_shape)
    text = lowered.as_text()
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in text
    assert "stablehlo.while" in text
    param_bytes, cache_bytes = per_device_bytes(params), per_device_bytes(cache)
    model = presets.get_preset(preset)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    full = abstract_cache(
        model, RL_SEQS, PROMPT_BUCKET + STAGE1_NEW_TOKENS, mesh, rules_lib.get_rules("decode")
    )
    full_bytes = per_device_bytes(full)
    print(
        f"sampler {preset} on {math.prod(mesh_shape)} devices: params "
        f"{param_bytes / 2**30:.2f} GiB + KV cache {cache_bytes / 2**30:.2f} GiB/device "
        f"(cache at {PROMPT_BUCKET}+{STAGE1_NEW_TOKENS} slots: {full_bytes / 2**30:.2f} GiB)"
    )
    assert 0 < param_bytes + cache_bytes < DECODE_BUDGET_BYTES
    assert full_bytes < FULL_CACHE_BUDGET_BYTES
    # The cache is sharded over batch and kv heads, not replicated.
    dp, tp = mesh_shape[0] * mesh_shape[1], mesh_shape[2]
    assert per_device_bytes({"k": full["k"]}) * dp * tp == math.prod(full["k"].shape) * 2


# ---------------------------------------------------------------------------
# Long context: SFT at 32K and RL at 48K tokens per sequence, splash attention
# and the Pallas TPU log-prob kernel, sequence parallelism (`fsdp_tp_sp`) on
# the `:8b`/`:14b` configs' mesh layout (tensor parallelism 8), the MLP over
# 2,048-token slices (`model.mlp_seq_chunk`, as the long-context configs), and
# the memory per device.
#
# No TPU backend here, so the pod step is not compiled for TPU. Checked instead:
#   1. The whole step lowers for TPU on the abstract mesh with the Mosaic
#      kernels: splash attention (forward, dq, dkv) and the fused log-prob
#      (forward) inside `shard_map` (manual sharding in the HLO). Tracing runs
#      with `jax.default_backend()` reporting "tpu" so every by-platform choice
#      (Pallas interpret mode off) is the one a TPU host makes.
#   2. The whole step compiles with XLA:CPU on the same mesh shape (64 or 256
#      fake CPU devices, in a subprocess), `chunked_xla` attention and
#      log-prob standing in for the TPU kernels; its memory analysis
#      (arguments + temporaries per device) must stay under the H200-class
#      budget. It over-counts what a TPU needs: XLA:CPU runs bf16 matmuls and
#      collectives in float32 (its all-gathers and projection outputs are
#      twice the size) and converts the bf16 remat stack to float32 around
#      its dynamic-update-slice; chunked attention holds O(block x T) scores
#      where splash holds O(block^2) tiles. TPU's own figure is unmeasured.
#   3. A per-piece estimate must stay under the v5e-class budget:
#        state = params + Adam moments per device (abstract shapes, exact),
#        grads = 2 x per-device f32 params (accumulator + current micro-batch),
#        carry = L x T x D x 2 bytes / tp (what full remat saves: each layer's
#                bf16 input, its sequence split over 'tensor'),
#        layer = temp + outputs of one rematerialized layer's gradient,
#                compiled by XLA:CPU on a (1, 1, tp) mesh of the test's fake
#                devices under the same rules (chunked attention: over-counts),
#        head  = temp + outputs of the fused log-prob's gradient at
#                [T, D] x [D, V/tp] (`chunked_xla`, the TPU path's backward).
#      The estimate agrees with the whole-step figure of 2 within 10%.
# Without sequence parallelism neither holds at these lengths: the residual
# stream saved for the backward alone is L x T x D x 2 bytes per sequence
# (9 GiB for 8B at 32K, 18.8 GiB for 14B at 48K), whatever the device count.

H200_BUDGET_BYTES = 95 * 2**30
V5E_BUDGET_BYTES = 16 * 2**30
LONG = {"sft": 32 * 1024, "rl": 48 * 1024}  # RL: 1K prompt + 47K response, one bucket
LONG_RULES = "fsdp_tp_sp"
# The MLP over 2,048-token slices, as the long-context configs run it.
LONG_KERNELS = dict(attention_impl="splash", logprob_impl="pallas_tpu", mlp_seq_chunk=2048)
CPU_KERNELS = dict(attention_impl="chunked_xla", logprob_impl="chunked_xla", mlp_seq_chunk=2048)
LONG_MESHES = pytest.mark.parametrize(
    "mesh_shape", [(1, 8, 8), (1, 32, 8)], ids=["64dev", "256dev"]
)


@pytest.fixture
def tpu_host(monkeypatch):
    """By-platform choices (kernel defaults, interpret mode) as on a TPU host."""
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")


def lower_long(
    preset: str, phase: str, mesh_shape, kernels=LONG_KERNELS, platform="tpu", rules=LONG_RULES
):
    """The SFT or RL step at `LONG[phase]` tokens, one sequence per device per micro-batch."""
    dp = mesh_shape[0] * mesh_shape[1]
    kw = dict(kernels, rules=rules, platform=platform)
    if phase == "sft":
        return lower_sft_step(preset, mesh_shape, 4 * dp, LONG["sft"], 4, **kw)
    return lower_rl_step(preset, mesh_shape, RL_SEQS, LONG["rl"], RL_SEQS // dp, **kw)


def _compiled_bytes(fn, *args) -> int:
    m = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(m.temp_size_in_bytes + m.output_size_in_bytes)


def layer_bytes(model, tp: int, seq_len: int) -> int:
    """Temp + outputs of one rematerialized layer's gradient, partitioned over `tp` devices."""
    model = dataclasses.replace(model, attention_impl="chunked_xla")
    block = transformer.Block(model)
    mesh = mesh_lib.make_mesh((1, 1, tp), devices=jax.devices()[:tp])
    rules = rules_lib.get_rules(LONG_RULES)
    res = rules_lib.spec(("act_batch", "act_res_len", "act_embed"), rules)
    x = _sharded((1, seq_len, model.d_model), jnp.bfloat16, NamedSharding(mesh, res))
    ids = _sharded((1, seq_len), jnp.int32, rules_lib.batch_sharding(mesh, rules, 2))

    def init(x, ids):
        return block.init(jax.random.key(0), (x, {}), jnp.int32(0), ids, ids, ids)["params"]

    with nn.logical_axis_rules(rules):
        boxed = jax.eval_shape(init, x, ids)
        shardings = rules_lib.logical_to_sharding(nn.get_partition_spec(boxed), mesh, rules)
    params = jax.tree.map(
        lambda a, s: _sharded(a.shape, a.dtype, s), nn.meta.unbox(boxed), shardings
    )

    def apply(params, x, ids):
        (y, _), _ = block.apply({"params": params}, (x, {}), jnp.int32(0), ids, ids, ids)
        return y

    def loss(params, x, ids):
        with nn.logical_axis_rules(rules):
            y = jax.checkpoint(apply, policy=jax.checkpoint_policies.nothing_saveable)(
                params, x, ids
            )
        return jnp.sum(y.astype(jnp.float32))

    with jax.set_mesh(mesh):
        return _compiled_bytes(jax.grad(loss, argnums=(0, 1)), params, x, ids)


def head_bytes(model, tp: int, seq_len: int) -> int:
    """Temp + outputs of the fused log-prob gradient at [T, D] x [D, V/tp] (chunked_xla)."""
    h = jax.ShapeDtypeStruct((seq_len, model.d_model), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((model.d_model, model.vocab_size // tp), jnp.bfloat16)
    y = jax.ShapeDtypeStruct((seq_len,), jnp.int32)

    def loss(h, w, y):
        logp, ent = fused_logprob_api.token_logprobs(h, w, y, implementation="chunked_xla")
        return jnp.sum(logp + ent)

    return _compiled_bytes(jax.grad(loss, argnums=(0, 1)), h, w, y)


def memory_estimate(preset: str, phase: str, mesh_shape) -> dict[str, int]:
    model = presets.get_preset(preset, mlp_seq_chunk=LONG_KERNELS["mlp_seq_chunk"])
    tp, t = mesh_shape[2], LONG[phase]
    tx = optimizer.make(config_lib.Config(stage="sft", model=model).optim, 1000)
    mesh = mesh_lib.make_abstract_mesh(mesh_shape)
    abstract, _ = state_lib.abstract_state(model, tx, mesh, rules_lib.get_rules(LONG_RULES))
    return {
        "state": per_device_bytes(abstract),
        "grads": 2 * per_device_bytes(abstract.params),
        "carry": model.num_layers * t * model.d_model * 2 // tp,
        "layer": layer_bytes(model, tp, t),
        "head": head_bytes(model, tp, t),
    }


def whole_step_bytes(preset: str, phase: str, mesh_shape) -> int:
    """Arguments + temporaries per device of the step compiled by XLA:CPU (subprocess)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    shape = ",".join(map(str, mesh_shape))
    out = subprocess.run(
        [sys.executable, "-m", "tests.compile_test", preset, phase, shape],
        cwd=root,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["bytes"]


@pytest.mark.slow
@PRESETS
@LONG_MESHES
@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_long_context_step_lowers_with_pallas_kernels(tpu_host, preset, mesh_shape, phase):
    lowered, _ = lower_long(preset, phase, mesh_shape)
    text = lowered.as_text()
    assert f"mhlo.num_partitions = {math.prod(mesh_shape)}" in text
    # Splash forward + dq + dkv and the log-prob forward are Mosaic kernels
    # (not interpret-mode XLA), inside shard_maps (attention, log-prob fwd/bwd).
    assert text.count("tpu_custom_call") >= 4
    assert text.count("sdy.manual_computation") >= 3


@pytest.mark.slow
@PRESETS
@LONG_MESHES
@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_long_context_memory_under_budget(preset, mesh_shape, phase):
    parts = memory_estimate(preset, phase, mesh_shape)
    total = sum(parts.values())
    whole = whole_step_bytes(preset, phase, mesh_shape)
    gib = {k: round(v / 2**30, 2) for k, v in parts.items()}
    print(
        f"{phase} {preset} T={LONG[phase]} on {math.prod(mesh_shape)} devices: {gib} "
        f"estimate {total / 2**30:.2f} GiB (v5e budget 16), XLA:CPU whole step "
        f"{whole / 2**30:.2f} GiB (H200 budget 95)"
    )
    assert 0 < total < V5E_BUDGET_BYTES
    assert whole < H200_BUDGET_BYTES
    assert abs(total - whole) < 0.1 * whole  # the pieces account for the compiled step
    model = presets.get_preset(preset)
    scores = model.num_heads // mesh_shape[2] * LONG[phase] ** 2 * 4
    assert parts["layer"] < scores / 4


def test_sequence_parallel_splits_the_saved_residual_stream():
    """Under `fsdp_tp_sp` the scan saves each layer's input with T/tp tokens per device.

    A 16-layer model at T=2048 on (1, 2, 4) CPU devices: the compiled step
    holds the stacked remat inputs as [16, 1, 512, D] instead of
    [16, 1, 2048, D], and its temporaries shrink by at least 3/4 of the
    3/4 of that stack a device no longer keeps (buffer reuse blurs the rest).
    """
    model = presets.ModelConfig(
        vocab_size=256,
        d_model=128,
        num_layers=16,
        num_heads=8,
        num_kv_heads=4,
        head_dim=16,
        d_ff=256,
        max_seq_len=2048,
        attention_impl="chunked_xla",
        remat_policy="full",
    )
    seq, stacks, temps = 2048, {}, {}
    for name in ("fsdp_tp", "fsdp_tp_sp"):
        lowered, _ = lower_sft_step(model, (1, 2, 4), 2, seq, 1, rules=name, platform="cpu")
        compiled = lowered.compile()
        stacks[name] = set(re.findall(r"\[16,1,(\d+),128\]", compiled.as_text()))
        temps[name] = compiled.memory_analysis().temp_size_in_bytes
    assert stacks == {"fsdp_tp": {"2048"}, "fsdp_tp_sp": {"512"}}
    stack_bytes = 16 * seq * model.d_model * jnp.dtype(model.dtype).itemsize
    assert temps["fsdp_tp"] - temps["fsdp_tp_sp"] >= 0.75 * stack_bytes * 3 / 4


def _main(preset: str, phase: str, shape: str, rules=LONG_RULES, mlp_chunk=None) -> None:
    """Prints {"bytes": args + temp per device} of the step compiled by XLA:CPU.

    `python -m tests.compile_test qwen3_14b rl 1,8,8 [RULES] [MLP_CHUNK]`: the
    figures of docs/kernels.md, "Compiled memory at the papers' lengths"
    (defaults: this file's `fsdp_tp_sp` and 2,048-token MLP slices).
    """
    mesh_shape = tuple(int(n) for n in shape.split(","))
    jax.config.update("jax_num_cpu_devices", math.prod(mesh_shape))
    kernels = dict(CPU_KERNELS)
    if mlp_chunk is not None:
        kernels["mlp_seq_chunk"] = int(mlp_chunk)
    lowered, _ = lower_long(preset, phase, mesh_shape, kernels, "cpu", rules)
    m = lowered.compile().memory_analysis()
    print(json.dumps({"bytes": int(m.argument_size_in_bytes + m.temp_size_in_bytes)}))


if __name__ == "__main__":
    _main(*sys.argv[1:])
