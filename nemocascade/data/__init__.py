"""Data layer: tokenizer, dual-mode chat template, grain pipelines and packing.

`tokenizer` wraps the shipped SentencePiece model (`build_tokenizer` regenerates
it), `chat_template` renders prompts, SFT targets and RM inputs in either mode
and parses completions, `pipelines` builds checkpointable grain loaders for SFT,
held-out loss, reward-model pairs and RL prompts, and `packing` turns token
sequences into training rows.
"""
