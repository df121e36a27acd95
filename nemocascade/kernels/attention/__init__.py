"""Grouped-query attention with slot/segment masks behind one dispatching function.

Entry point: `api.attention`. Implementations: `xla` (materialized scores, the
reference and oracle), `blocked_xla` (causal query blocks, hand-written
backward; the CPU default), `chunked_xla` (query blocks, O(T·block) memory),
`dot_product` (`jax.nn.dot_product_attention`), `splash` (JAX's Pallas TPU
splash attention), `pallas_gpu` (JAX's Pallas GPU flash attention);
`sharded` wraps the Pallas kernels in `jax.shard_map`. See docs/kernels.md.
"""
