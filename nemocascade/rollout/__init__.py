"""Rollouts: sampling methods, the KV-cache decoder, decoding modes, RL group sampling.

* `sampling_methods`: `Greedy` / `Sample` and the pure `[B, V]` token chooser.
* `decoding`: `generate` — prefill + `while_loop` decode over a donated KV cache.
* `modes`: instruct vs thinking as data (template, stops, budgets, parser).
* `groups`: `sample_groups` — G samples per prompt as a trainer-ready `RolloutBatch`.
* `completions`: completions of prompt records in one mode (generate, evaluate).
"""
