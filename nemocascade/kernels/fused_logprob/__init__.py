"""Fused per-token log-prob and entropy from hidden states and the unembedding.

Entry points: `api.token_logprobs` (single device or inside a caller's
shard_map) and `sharded.token_logprobs` (batch- and vocabulary-sharded over a
mesh). Implementations: `reference` (materialized logits, the oracle),
`chunked_xla` (default on CPU), `pallas_tpu`, `pallas_gpu`; shared math in
`online_softmax`. See docs/kernels.md.
"""
