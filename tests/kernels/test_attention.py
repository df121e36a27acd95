"""Attention implementations against the reference: values and gradients with
causal + segment masks + GQA (Pallas kernels in interpret mode), fallbacks,
shard_map over 8 fake devices == single device, bucketed cache reads == whole
cache, sampler log-probs == trainer's."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nemocascade.kernels.attention import (
    api,
    blocked_xla,
    chunked_xla,
    decode,
    reference,
    sharded,
)
from nemocascade.model import presets
from nemocascade.rollout import decoding, sampling_methods
from nemocascade.sharding import mesh as mesh_lib, rules as rules_lib
from nemocascade.trainer import forward
from tests.rollout import helpers

TOL = {jnp.float32: 2e-5, jnp.bfloat16: 2e-2}
B, T, N, K, H = 2, 256, 4, 2, 32
BLOCK = {
    "splash": 128,
    "pallas_gpu": 64,
    "chunked_xla": 96,
    "blocked_xla": 48,
}  # several tiles per row


def _segments(b: int, t: int) -> np.ndarray:
    """Row 0: two packed sequences then padding; other rows: three sequences."""
    seg = np.ones((b, t), np.int32)
    seg[0, 100:220], seg[0, 220:] = 2, 0
    seg[1:, t // 3 : 2 * t // 3], seg[1:, 2 * t // 3 :] = 2, 3
    return seg


def _inputs(dtype, b=B, t=T, n=N, k=K, h=H, seed=0):
    rng = np.random.default_rng(seed)
    q, kk, v = (jnp.asarray(rng.normal(size=(b, t, heads, h)), dtype) for heads in (n, k, k))
    seg = jnp.asarray(_segments(b, t))
    slot = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    cot = jnp.asarray(rng.normal(size=(b, t, n, h)), jnp.float32)
    return q, kk, v, slot, seg, cot


def _loss_and_grads(fn, q, k, v, seg, cot):
    """Σ out · cot over non-padding queries, and its gradients w.r.t. q, k, v."""
    valid = (seg != 0)[:, :, None, None]

    def loss(q, k, v):
        return jnp.sum(fn(q, k, v).astype(jnp.float32) * cot * valid)

    return jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)


def _check(a, b, tol):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a, b, atol=tol * max(1.0, np.abs(b).max()), rtol=tol)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("impl", api.IMPLEMENTATIONS)
def test_matches_reference_values_and_gradients(impl, dtype):
    q, k, v, slot, seg, cot = _inputs(dtype)
    block = BLOCK.get(impl)

    def run(name, blk):
        return lambda q, k, v: api.attention(
            q, k, v, slot, seg, slot, seg, implementation=name, self_attention=True, block=blk
        )

    out = run(impl, block)(q, k, v)
    ref = run("xla", None)(q, k, v)
    assert out.shape == (B, T, N, H) and out.dtype == dtype
    valid = np.asarray(seg != 0)
    _check(np.asarray(out, np.float32)[valid], np.asarray(ref, np.float32)[valid], TOL[dtype])
    val, grads = _loss_and_grads(run(impl, block), q, k, v, seg, cot)
    ref_val, ref_grads = _loss_and_grads(run("xla", None), q, k, v, seg, cot)
    _check(val, ref_val, TOL[dtype])
    for g, rg in zip(grads, ref_grads, strict=True):
        assert np.abs(np.asarray(rg, np.float32)).max() > 0
        _check(g, rg, TOL[dtype])


def test_chunked_xla_equals_reference_to_f32_rounding_with_ragged_blocks():
    q, k, v, slot, seg, _ = _inputs(jnp.float32, t=200)
    out = chunked_xla.attention(q, k, v, slot, seg, slot, seg, block_q=64)  # 200 = 3·64 + 8
    ref = reference.attention(q, k, v, slot, seg, slot, seg)
    np.testing.assert_allclose(out, ref, atol=2e-6, rtol=2e-6)  # padding rows too


def test_blocked_xla_ragged_blocks_and_cache_reads_equal_reference():
    q, k, v, slot, seg, cot = _inputs(jnp.float32, t=200)

    def reference_fn(q, k, v):
        return reference.attention(q, k, v, slot, seg, slot, seg)

    ref = reference_fn(q, k, v)
    ref_grads = _loss_and_grads(reference_fn, q, k, v, seg, cot)[1]
    valid = np.asarray(seg != 0)
    for self_attention, block in ((True, 64), (True, 200), (False, 64)):  # 200 = 3·64 + 8

        def run(q, k, v, self_attention=self_attention, block=block):
            return blocked_xla.attention(
                q, k, v, slot, seg, slot, seg, self_attention=self_attention, block_q=block
            )

        out = run(q, k, v)
        rows = valid if self_attention and block < 200 else np.ones_like(valid)  # padding rows too
        np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(ref)[rows], atol=2e-6)
        grads = _loss_and_grads(run, q, k, v, seg, cot)[1]
        for g, rg in zip(grads, ref_grads, strict=True):
            _check(g, rg, 2e-5)
    # The causal blocks form only the scores at or below each block's last key.
    text = jax.jit(run).lower(q, k, v).as_text()  # self_attention=False: the reference
    assert "200x200" in text
    causal = (
        jax.jit(
            lambda q, k, v: blocked_xla.attention(
                q, k, v, slot, seg, slot, seg, self_attention=True, block_q=64
            )
        )
        .lower(q, k, v)
        .as_text()
    )
    assert "64x64xf32" in causal and "8x200xf32" in causal and "200x200" not in causal


@pytest.mark.parametrize("impl", ["splash", "pallas_gpu"])
def test_pallas_falls_back_to_chunked_on_cache_calls_and_ragged_lengths(impl):
    q, k, v, slot, seg, _ = _inputs(jnp.float32, t=96)
    ref = reference.attention(q, k, v, slot, seg, slot, seg)
    # A cache read (self_attention=False) and a length no tile divides.
    for t, self_attention in ((96, False), (90, True)):
        args = (q[:, :t], k[:, :t], v[:, :t], slot[:, :t], seg[:, :t], slot[:, :t], seg[:, :t])
        out = api.attention(*args, implementation=impl, self_attention=self_attention, block=64)
        np.testing.assert_allclose(out, ref[:, :t], atol=2e-6, rtol=2e-6)


def test_unknown_implementation_names_the_field():
    with pytest.raises(ValueError, match="model.attention_impl='flash'"):
        api.resolve("flash")
    with pytest.raises(ValueError, match="model.attention_impl"):
        presets.get_preset("tiny", attention_impl="flash")
    assert presets.ATTENTION_IMPLS == ("",) + api.IMPLEMENTATIONS
    assert api.resolve("") == "blocked_xla"  # the CPU default


MESH_AXES = sharded.MeshAxes(batch=("data", "fsdp"), heads="tensor", kv_heads="tensor")


@pytest.mark.parametrize("impl", ["splash", "pallas_gpu"])
def test_shard_mapped_kernel_equals_single_device(impl):
    q, k, v, slot, seg, cot = _inputs(jnp.float32, b=4, t=128)
    mesh = mesh_lib.make_mesh((1, 4, 2))

    def run(axes):
        return lambda q, k, v: api.attention(
            q,
            k,
            v,
            slot,
            seg,
            slot,
            seg,
            implementation=impl,
            self_attention=True,
            block=BLOCK[impl],
            mesh_axes=axes,
        )

    single = _loss_and_grads(run(None), q, k, v, seg, cot)
    with jax.set_mesh(mesh):
        text = jax.jit(run(MESH_AXES)).trace(q, k, v).jaxpr.pretty_print()
        assert "shard_map" in text
        multi = jax.jit(lambda *a: _loss_and_grads(run(MESH_AXES), *a))(q, k, v, seg, cot)
    for a, b in zip(jax.tree.leaves(multi), jax.tree.leaves(single), strict=True):
        _check(a, b, 2e-5)


def _model_batch(cfg, b, t, seed=1):
    rng = np.random.default_rng(seed)
    seg = _segments(b, t)
    pos = np.zeros_like(seg)
    for row in range(b):  # positions restart per packed segment
        for s in np.unique(seg[row]):
            idx = np.nonzero(seg[row] == s)[0]
            pos[row, idx] = np.arange(len(idx))
    tokens = rng.integers(1, cfg.vocab_size, size=(b, t)).astype(np.int32)
    return {
        "inputs": tokens,
        "targets": np.roll(tokens, -1, axis=1),
        "positions": pos,
        "segment_ids": seg,
    }


@pytest.mark.parametrize("rules_name", ["fsdp_tp", "fsdp_tp_sp"])
@pytest.mark.parametrize("impl", ["blocked_xla", "chunked_xla", "splash", "pallas_gpu"])
def test_model_forward_fsdp_tp_on_8_devices_equals_single_device_reference(impl, rules_name):
    cfg = dataclasses.replace(helpers.TOY_MODEL, max_seq_len=128)
    params = helpers.random_params(cfg)
    batch = _model_batch(cfg, b=4, t=128)  # one splash tile
    ref, _ = forward.sequence_logprobs(
        params, dataclasses.replace(cfg, attention_impl="xla"), batch
    )
    mesh = mesh_lib.make_mesh((1, 4, 2))
    rules = rules_lib.get_rules(rules_name)
    impl_cfg = dataclasses.replace(cfg, attention_impl=impl)

    def logp(params, batch):
        with nn.logical_axis_rules(rules):
            return forward.sequence_logprobs(params, impl_cfg, batch)[0]

    with jax.set_mesh(mesh):
        put = jax.device_put(batch, rules_lib.batch_sharding(mesh, rules, 2))
        out = jax.jit(logp)(params, put)
    valid = batch["segment_ids"] != 0
    np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref)[valid], atol=2e-5)


@pytest.mark.parametrize("impl", api.IMPLEMENTATIONS)
def test_sampler_logprobs_equal_trainer_logprobs(impl):
    cfg = dataclasses.replace(helpers.TOY_MODEL, attention_impl=impl, max_seq_len=128)
    params = helpers.random_params()
    # Prompt bucket 16 + 112 new tokens = 128: one splash tile, two Pallas GPU tiles.
    prompts, max_new = [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12, 13, 14, 15]], 112
    out = decoding.generate(
        params,
        cfg,
        prompts,
        method=sampling_methods.Greedy(),
        rng=jax.random.key(0),
        stop_ids=(),
        max_new_tokens=max_new,
    )
    assert out.prompt_tokens.shape[1] + max_new == 128  # tile-aligned: the Pallas kernels run
    _assert_trainer_agrees(params, cfg, out, max_new)


def _assert_trainer_agrees(params, cfg, out, max_new):
    """The trainer's log-probs of the sampled completions equal the sampler's."""
    tokens = np.concatenate([out.prompt_tokens, out.completion_tokens], axis=1)
    p = out.prompt_tokens.shape[1]
    pad = p - out.prompt_lengths
    slots = np.arange(tokens.shape[1])[None]
    batch = {
        "inputs": tokens,
        "targets": np.roll(tokens, -1, axis=1),
        "positions": np.maximum(slots - pad[:, None], 0).astype(np.int32),
        "segment_ids": (slots >= pad[:, None]).astype(np.int32),
    }
    logp, _ = forward.sequence_logprobs(params, cfg, batch)
    trainer = np.asarray(logp)[:, p - 1 : p - 1 + max_new]
    np.testing.assert_allclose(out.logprobs, trainer, atol=2e-5)


def test_bucket_sizes_halve_to_aligned_prefixes():
    assert decode.bucket_sizes(1040, 256) == (256, 384, 640, 1040)
    assert decode.bucket_sizes(300, 256) == (256, 300)  # 150 rounds up to 256
    assert decode.bucket_sizes(256, 256) == (256,)  # a half would be < 256 slots
    # Default: caches of the tiny/small presets keep one bucket; a 49K cache has 6.
    assert decode.bucket_sizes(512) == (512,) and decode.bucket_sizes(1024) == (1024,)
    assert decode.bucket_sizes(49_152) == tuple(49_152 >> i for i in range(5, -1, -1))


@pytest.mark.parametrize("t", [1, 4])
def test_bucketed_cache_read_equals_whole_cache(t):
    rng = np.random.default_rng(3)
    layers, b, s = 2, 2, 512
    cache = {  # the KV cache's heads-major layout, [L, B, K, S, H]
        "k": jnp.asarray(rng.normal(size=(layers, b, K, s, H)), jnp.float32),
        "v": jnp.asarray(rng.normal(size=(layers, b, K, s, H)), jnp.float32),
    }
    slots = np.arange(s)
    attend = functools.partial(api.attention, implementation="xla")

    @jax.jit
    def both(q, seg_lbs, filled):
        q_slot = jnp.broadcast_to(filled - t + jnp.arange(t, dtype=jnp.int32), (b, t))
        q_seg = jnp.ones((b, t), jnp.int32)
        c = dict(cache, seg=seg_lbs)

        def read(size):  # layer 1's first `size` slots
            return c["k"][1, :, :, :size], c["v"][1, :, :, :size], c["seg"][1, :, :size]

        out = decode.attention(attend, q, q_slot, q_seg, read, s, filled, min_bucket=128)
        k_slot = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
        k_bskh, v_bskh = (jnp.swapaxes(c[n][1], 1, 2) for n in ("k", "v"))
        ref = reference.attention(q, k_bskh, v_bskh, q_slot, q_seg, k_slot, seg_lbs[1])
        return out, ref

    for filled in (4 + t, 100, 128, 129, 300, 511, 512):  # every query sees a key
        seg = (slots < filled) & (slots >= np.array([[0], [3]]))  # row 1: 3 left-pad slots
        seg_lbs = jnp.asarray(np.broadcast_to(seg, (layers, b, s)).astype(np.int32))
        q = jnp.asarray(rng.normal(size=(b, t, N, H)), jnp.float32)
        out, ref = both(q, seg_lbs, jnp.int32(filled))
        np.testing.assert_allclose(out, ref, atol=2e-6, rtol=2e-6)
    text = both.lower(q, seg_lbs, jnp.int32(1)).as_text()
    assert "stablehlo.case" in text  # buckets 128, 256, 512: one program, three branches


def test_sampler_long_cache_reads_buckets_and_equals_trainer():
    cfg = dataclasses.replace(helpers.TOY_MODEL, attention_impl="xla", max_seq_len=2048)
    params = helpers.random_params()
    out = decoding.generate(
        params,
        cfg,
        [[1, 2, 3], [4, 5, 6, 7, 8]],
        method=sampling_methods.Greedy(),
        rng=jax.random.key(0),
        stop_ids=(),
        max_new_tokens=2032,
    )  # cache 16 + 2032 = 2048 slots: buckets 1024 and 2048
    assert decode.bucket_sizes(2048) == (1024, 2048)
    _assert_trainer_agrees(params, cfg, out, 2032)
