"""Rollout engine: sampling methods, the KV-cache sampler, decoding modes, RL group sampling.

* `sampling`: `Greedy` / `Sample` and the pure `[B, V]` token chooser.
* `sampler`: `generate` — prefill + `while_loop` decode over a donated cache.
* `modes`: instruct vs thinking as data (template, stops, budgets, parser).
* `engine`: `sample_groups` — G samples per prompt as a trainer-ready batch.
"""
