"""Causal-blocked XLA attention with a hand-written backward (impl `blocked_xla`).

Two changes to the reference's arithmetic, both exact in real arithmetic:

* **Causal blocks.** In the training forward (`self_attention=True`: the keys
  are the queries' own tokens and slot = row index), query block
  `[i0, i1)` can only see keys `[0, i1)`, so it is computed against that
  prefix alone. With blocks of `block_q` rows the score tiles hold
  `(nb + 1) / (2 nb)` of the `T²` entries the reference forms (`nb` blocks),
  and every masked entry the blocks skip would have had weight exactly 0.
  The blocks are a static Python loop: each has its own shape.
* **A backward that keeps only what it needs.** The VJP saves the
  probabilities `P` and the output `O` and uses FlashAttention's identity
  `dS = P ∘ (dP − rowsum(dO ∘ O))`, so the backward makes one elementwise
  pass over each score tile instead of autodiff's softmax and `where`
  transposes. Heads are laid out first (`[B, N, T, H]`, kv heads repeated to
  `N`) so every product is a plain batched matmul.

On XLA:CPU this is faster than the reference at the tiny models' lengths
(docs/benchmarks.md has the figures and the command). Memory is the
reference's order (`O(T²)` probabilities are kept for the backward);
long sequences use `chunked_xla` or the Pallas kernels instead.

A query that sees no key (a padding query) gets uniform weights over the keys
of its block's prefix rather than over all keys; those rows are masked out of
every loss, as for the other implementations. Without `self_attention` (KV
cache prefill and decode, where nothing is differentiated and a one-token
query would pay for laying out the whole cache heads-first) this is the
reference itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nemocascade.kernels.attention import reference

DEFAULT_BLOCK_Q = 64


@jax.custom_vjp
def _heads_attention(q_bnth, k_bnsh, v_bnsh, bias_bts):
    return _forward(q_bnth, k_bnsh, v_bnsh, bias_bts)[0]


def _forward(q_bnth, k_bnsh, v_bnsh, bias_bts):
    scale = q_bnth.shape[-1] ** -0.5
    scores = (
        jnp.einsum("bnth,bnsh->bnts", q_bnth, k_bnsh, preferred_element_type=jnp.float32) * scale
        + bias_bts[:, None]
    )
    exp = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    probs = exp / jnp.sum(exp, axis=-1, keepdims=True)
    out = jnp.einsum("bnts,bnsh->bnth", probs.astype(v_bnsh.dtype), v_bnsh)
    return out, (q_bnth, k_bnsh, v_bnsh, probs, out)


def _backward(res, d_out):
    q_bnth, k_bnsh, v_bnsh, probs, out = res
    scale = q_bnth.shape[-1] ** -0.5
    f32 = jnp.float32
    d_v = jnp.einsum("bnts,bnth->bnsh", probs.astype(d_out.dtype), d_out)
    d_probs = jnp.einsum("bnth,bnsh->bnts", d_out, v_bnsh, preferred_element_type=f32)
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)
    d_scores = (probs * (d_probs - delta) * scale).astype(q_bnth.dtype)
    d_q = jnp.einsum("bnts,bnsh->bnth", d_scores, k_bnsh)
    d_k = jnp.einsum("bnts,bnth->bnsh", d_scores, q_bnth)
    return d_q, d_k, d_v.astype(v_bnsh.dtype), None


_heads_attention.defvjp(_forward, _backward)


def _block(q_btnh, k_bskh, v_bskh, q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs):
    """One query block against the given keys: `[B, T, N, H]` in `v`'s dtype."""
    groups = q_btnh.shape[2] // k_bskh.shape[2]

    def heads_first(x, dtype, repeats=1):
        return jnp.repeat(jnp.transpose(x.astype(dtype), (0, 2, 1, 3)), repeats, axis=1)

    mask = reference.mask_bts(q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    bias = jnp.where(mask, 0.0, reference.NEG_INF).astype(jnp.float32)
    out_bnth = _heads_attention(
        heads_first(q_btnh, q_btnh.dtype),
        heads_first(k_bskh, q_btnh.dtype, groups),
        heads_first(v_bskh, v_bskh.dtype, groups),
        bias,
    )
    return jnp.transpose(out_bnth, (0, 2, 1, 3)).astype(v_bskh.dtype)


def attention(
    q_btnh,
    k_bskh,
    v_bskh,
    q_slot_bt,
    q_seg_bt,
    k_slot_bs,
    k_seg_bs,
    *,
    self_attention: bool = False,
    block_q: int = DEFAULT_BLOCK_Q,
) -> jax.Array:
    """Masked GQA attention `[B, T, N, H]`; causal blocks when `self_attention`."""
    args = (q_slot_bt, q_seg_bt, k_slot_bs, k_seg_bs)
    t = q_btnh.shape[1]
    if not self_attention:
        return reference.attention(q_btnh, k_bskh, v_bskh, *args)
    if t <= block_q:
        return _block(q_btnh, k_bskh, v_bskh, *args)
    outs = []
    for lo in range(0, t, block_q):
        hi = min(t, lo + block_q)
        outs.append(
            _block(
                q_btnh[:, lo:hi],
                k_bskh[:, :hi],
                v_bskh[:, :hi],
                q_slot_bt[:, lo:hi],
                q_seg_bt[:, lo:hi],
                k_slot_bs[:, :hi],
                k_seg_bs[:, :hi],
            )
        )
    return jnp.concatenate(outs, axis=1)
