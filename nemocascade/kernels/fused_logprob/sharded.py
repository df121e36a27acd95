"""Fused log-prob over a device mesh: tokens batch-sharded, vocabulary sharded.

`hidden [N, D]` is sharded over `batch_axes` (rows), `w [D, V]` over
`vocab_axis` (columns), targets like hidden. Inside `jax.shard_map` each device
computes the online-softmax partial of its own vocabulary columns with any
fused implementation (the kernels know nothing of meshes), then

    M = pmax(m);  S = psum(s · e^{m−M});  T = psum(e^{m−M} (t + (m − M) s))
    target = psum(local target logit, 0 where the target is another shard's)

gives the exact full-vocabulary `lse`, log-prob and entropy
(`online_softmax.shift`/`finalize`). Per device the logits tile is
`[N/batch, V/vocab]` at most, and only chunk-sized on the fused paths.

Backward (custom VJP, recompute): each device runs `chunked_xla.backward` on
its shard with the global `lse` and entropy; `dhidden` is `psum`-ed over the
vocabulary axis (each shard holds part of `dlogits @ wᵀ`) and `dw` over the
batch axes (each batch shard holds part of `hᵀ @ dlogits`).

The shard_maps run with `check_vma=False`: the kernels are mesh-agnostic (their
loop carries and `pallas_call` outputs carry no varying-axis types), the
collectives above are written out by hand, and nothing differentiates through
the shard_maps (the custom VJP sits outside them).

Shards see local column ids: targets are shifted by the shard's first column
and the valid-column count is clipped per shard, so a shard lying wholly in the
vocabulary padding contributes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from nemocascade.kernels.fused_logprob import api, chunked_xla, online_softmax

P = jax.sharding.PartitionSpec


@dataclasses.dataclass(frozen=True)
class _Static:
    """Non-differentiable configuration of one call (hashable)."""

    partial_stats: Callable[..., online_softmax.Partial]
    mesh: jax.sharding.Mesh
    batch_axes: str | tuple[str, ...] | None
    vocab_axis: str | None
    valid_vocab: int
    temperature: float
    compute_entropy: bool
    token_block: int | None
    vocab_block: int | None

    def specs(self):
        """PartitionSpecs of hidden, w, per-token arrays."""
        return P(self.batch_axes, None), P(None, self.vocab_axis), P(self.batch_axes)

    def place(self, x: jax.Array, spec: P) -> jax.Array:
        """`x` resharded to `spec`: shard_map requires it on Explicit mesh axes."""
        if self.mesh.are_all_axes_auto:
            return x
        return jax.reshard(x, jax.NamedSharding(self.mesh, spec))

    def local_columns(self, v_local: int):
        """(first global column of this shard, its number of valid columns)."""
        if self.vocab_axis is None:
            return 0, self.valid_vocab
        offset = lax.axis_index(self.vocab_axis) * v_local
        return offset, jnp.clip(self.valid_vocab - offset, 0, v_local)

    def vocab_sum(self, x: jax.Array) -> jax.Array:
        return x if self.vocab_axis is None else lax.psum(x, self.vocab_axis)


def _forward(hidden, w, targets, static: _Static):
    h_spec, w_spec, n_spec = static.specs()

    def local(h, w, y):
        offset, num_valid = static.local_columns(w.shape[1])
        p = static.partial_stats(h, w, y - offset, num_valid)
        m = p.m if static.vocab_axis is None else lax.pmax(p.m, static.vocab_axis)
        q = online_softmax.shift(p, m)
        total = online_softmax.Partial(m, *(static.vocab_sum(x) for x in (q.s, q.t, q.target)))
        return online_softmax.finalize(total)

    return jax.shard_map(
        local,
        mesh=static.mesh,
        in_specs=(h_spec, w_spec, n_spec),
        out_specs=(n_spec,) * 3,
        check_vma=False,
    )(static.place(hidden, h_spec), static.place(w, w_spec), static.place(targets, n_spec))


def _like(x: jax.Array, primal: jax.Array) -> jax.Array:
    sharding = jax.typeof(primal).sharding
    if sharding.mesh.empty or sharding.mesh.are_all_axes_auto:
        return x
    return jax.reshard(x, sharding)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _fused(hidden, w, targets, static: _Static):
    logp, entropy, _ = _forward(hidden, w, targets, static)
    return logp, entropy


def _fused_fwd(hidden, w, targets, static: _Static):
    logp, entropy, lse = _forward(hidden, w, targets, static)
    return (logp, entropy), (hidden, w, targets, lse, entropy)


def _fused_bwd(static: _Static, residuals, cotangents):
    hidden, w, targets, lse, entropy = residuals
    g_logp, g_entropy = cotangents
    h_spec, w_spec, n_spec = static.specs()

    def local(h, w, y, lse, entropy, g_logp, g_entropy):
        offset, num_valid = static.local_columns(w.shape[1])
        dh, dw = chunked_xla.backward(
            h,
            w,
            y - offset,
            num_valid,
            lse,
            entropy if static.compute_entropy else None,
            g_logp,
            g_entropy if static.compute_entropy else None,
            temperature=static.temperature,
            token_block=static.token_block,
            vocab_block=static.vocab_block,
        )
        dh = static.vocab_sum(dh).astype(h.dtype)
        if static.batch_axes is not None:
            dw = lax.psum(dw, static.batch_axes)
        return dh, dw

    specs = (h_spec, w_spec) + (n_spec,) * 5
    args = (hidden, w, targets, lse, entropy, g_logp, g_entropy)
    dh, dw = jax.shard_map(
        local, mesh=static.mesh, in_specs=specs, out_specs=(h_spec, w_spec), check_vma=False
    )(*(static.place(x, spec) for x, spec in zip(args, specs, strict=True)))
    # Cotangents carry their primal's sharding (checked on Explicit axes).
    return _like(dh, hidden), _like(dw, w), None


_fused.defvjp(_fused_fwd, _fused_bwd)


def token_logprobs(
    hidden_nd: jax.Array,
    w_unembed_dv: jax.Array,
    targets_n: jax.Array,
    *,
    mesh: jax.sharding.Mesh,
    batch_axes: str | tuple[str, ...] | None = "data",
    vocab_axis: str | None = "tensor",
    temperature: float = 1.0,
    valid_vocab: int | None = None,
    compute_entropy: bool = True,
    forward_only: bool = False,
    implementation: str = "chunked_xla",
    interpret: bool | None = None,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Sharded `api.token_logprobs` for `hidden [N, D]`, `w [D, V]`, `targets [N]`.

    `N` must divide by the size of `batch_axes` and `V` by that of
    `vocab_axis` (None: the vocabulary is not sharded, tokens only).
    Arguments as in `api.token_logprobs`; `implementation` is the per-shard
    forward ("chunked_xla", "pallas_tpu", "pallas_gpu"), the backward is
    always the chunked XLA recompute.
    """
    vocab = w_unembed_dv.shape[1]
    valid_vocab = vocab if valid_vocab is None else int(valid_vocab)
    if not 1 <= valid_vocab <= vocab:
        raise ValueError(f"valid_vocab={valid_vocab} must be in [1, {vocab}].")
    static = _Static(
        api.partial_stats_fn(
            implementation,
            temperature=float(temperature),
            token_block=token_block,
            vocab_block=vocab_block,
            interpret=interpret,
        ),
        mesh,
        batch_axes,
        vocab_axis,
        valid_vocab,
        float(temperature),
        compute_entropy,
        token_block,
        vocab_block,
    )
    targets = targets_n.astype(jnp.int32)
    if forward_only:
        hidden, w = jax.lax.stop_gradient((hidden_nd, w_unembed_dv))
        logp, entropy, _ = _forward(hidden, w, targets, static)
    else:
        logp, entropy = _fused(hidden_nd, w_unembed_dv, targets, static)
    if not compute_entropy:
        entropy = jnp.zeros_like(logp)
    return logp, entropy
