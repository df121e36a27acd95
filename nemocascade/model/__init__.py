"""The decoder model: Flax Linen layers, KV cache, presets, reward head, Hugging Face conversion."""
