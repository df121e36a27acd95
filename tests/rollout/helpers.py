"""Toy models for sampler tests: small shapes, peaked and varied greedy outputs."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np

from nemocascade.model import transformer
from tests.trainer import helpers

# Untied head: a tied random model just copies its last input token.
TOY_MODEL = dataclasses.replace(helpers.TOY_MODEL, tie_embeddings=False)  # vocab 64
# Vocabulary of the shipped tokenizer, for tests that render real prompts.
TOY_MODEL_1K = dataclasses.replace(TOY_MODEL, vocab_size=1024, max_seq_len=512)


def random_params(cfg=TOY_MODEL, seed: int = 0, head_scale: float = 30.0):
    """N(0, 0.02) weights, unit norm scales, drawn with numpy.

    Skips compiling the model's initializer (seconds of XLA time per shape on
    CPU). The unembedding is scaled so logits spread over several nats: with
    0.02 weights they differ by ~1e-3 and greedy decoding could flip on float
    noise.
    """
    abstract = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        name = jax.tree_util.keystr(path)
        if "scale" in name:
            return np.ones(leaf.shape, leaf.dtype)
        w = rng.normal(0.0, 0.02, leaf.shape).astype(leaf.dtype)
        return w * head_scale if "lm_head" in name else w

    return jax.tree_util.tree_map_with_path(draw, abstract)
