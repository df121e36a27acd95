"""Model shapes: the typed `ModelConfig` and named presets.

`tiny` trains on 2 CPU cores in minutes, `small` is the CPU benchmark size,
the `qwen3_*` presets carry the published Qwen3 shapes (vocab 151,936,
qk-norm, rope theta 1e6) so the same code compiles for pod-size runs.
"""

from __future__ import annotations

import dataclasses

REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
DTYPES = ("float32", "bfloat16")
# `nemocascade/kernels/attention/api.py` implements these; "" picks by platform.
ATTENTION_IMPLS = ("", "xla", "blocked_xla", "chunked_xla", "dot_product", "splash", "pallas_gpu")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer shape and numerics.

    Attributes:
      vocab_size: number of embedding rows (V).
      d_model: residual width (D).
      num_layers: number of decoder blocks (L).
      num_heads: query heads (N).
      num_kv_heads: key/value heads (K); N must be a multiple of K (GQA).
      head_dim: per-head width (H).
      d_ff: SwiGLU hidden width (F).
      rope_theta: RoPE base frequency.
      rms_eps: RMSNorm epsilon.
      qk_norm: per-head RMSNorm on queries and keys (Qwen3).
      tie_embeddings: unembedding is the transposed embedding table.
      dtype: activation / matmul dtype.
      param_dtype: parameter storage dtype.
      remat_policy: rematerialization policy of each scanned block.
      scan_layers: stack layers with `nn.scan` (one compiled block).
      max_seq_len: longest sequence the model is used with (KV cache size cap).
      attention_impl: attention implementation (`ATTENTION_IMPLS`); "" picks
        by platform (cpu: blocked_xla, tpu: splash, gpu: chunked_xla).
      mlp_seq_chunk: run the MLP over slices of this many tokens, each
        rematerialized (0: the whole sequence at once). Long-context memory:
        the MLP's `[T, d_ff]` activations shrink to `[chunk, d_ff]` for one
        extra MLP forward per step. Sequences whose length is not a multiple
        of it (and decode steps) run whole.
    """

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_ff: int
    rope_theta: float = 10_000.0
    rms_eps: float = 1e-6
    qk_norm: bool = False
    tie_embeddings: bool = True
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat_policy: str = "none"
    scan_layers: bool = True
    max_seq_len: int = 2048
    attention_impl: str = ""
    mlp_seq_chunk: int = 0

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        for name in ("head_dim", "d_ff", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_heads ({self.num_heads}) must be a multiple of "
                f"model.num_kv_heads ({self.num_kv_heads})"
            )
        if self.mlp_seq_chunk < 0:
            raise ValueError(f"model.mlp_seq_chunk must be >= 0, got {self.mlp_seq_chunk}")
        if self.head_dim % 2:
            raise ValueError(f"model.head_dim must be even for RoPE, got {self.head_dim}")
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(
                f"model.remat_policy={self.remat_policy!r}; choose from {REMAT_POLICIES}"
            )
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(
                f"model.attention_impl={self.attention_impl!r}; choose from {ATTENTION_IMPLS}"
            )
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"model.{name}={getattr(self, name)!r}; choose from {DTYPES}")

    @property
    def num_params(self) -> int:
        """Parameter count (embeddings included once when tied)."""
        d, h = self.d_model, self.head_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2)
        norms = 2 * d + (2 * h if self.qk_norm else 0)
        block = attn + 3 * d * self.d_ff + norms
        emb = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.num_layers * block + emb + d

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), PaLM appendix B."""
        non_emb = self.num_params - self.vocab_size * self.d_model * (
            1 if self.tie_embeddings else 2
        )
        dense = 6.0 * (non_emb + self.vocab_size * self.d_model)
        attn = 12.0 * self.num_layers * self.num_heads * self.head_dim * seq_len / 2
        return dense + attn


_QWEN3 = dict(vocab_size=151_936, rope_theta=1_000_000.0, qk_norm=True, head_dim=128)

PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=1024,
        d_model=192,
        num_layers=4,
        num_heads=6,
        num_kv_heads=2,
        head_dim=32,
        d_ff=512,
        qk_norm=True,
        max_seq_len=512,
        # Four layers unrolled: XLA on CPU runs the train step faster than
        # the scanned block (bench/train_throughput.py --preset=tiny).
        scan_layers=False,
    ),
    "small": ModelConfig(
        vocab_size=1024,
        d_model=512,
        num_layers=8,
        num_heads=8,
        num_kv_heads=4,
        head_dim=64,
        d_ff=1536,
        qk_norm=True,
        max_seq_len=1024,
        # Unrolled, like `tiny`: XLA on CPU runs this preset's SFT step faster
        # than the scanned block (bench/train_throughput.py, docs/benchmarks.md).
        scan_layers=False,
    ),
    "qwen3_0_6b": ModelConfig(
        d_model=1024,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        d_ff=3072,
        tie_embeddings=True,
        max_seq_len=40_960,
        dtype="bfloat16",
        remat_policy="full",
        **_QWEN3,
    ),
    "qwen3_8b": ModelConfig(
        d_model=4096,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        d_ff=12_288,
        tie_embeddings=False,
        max_seq_len=40_960,
        dtype="bfloat16",
        remat_policy="full",
        **_QWEN3,
    ),
    "qwen3_14b": ModelConfig(
        d_model=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=8,
        d_ff=17_408,
        tie_embeddings=False,
        max_seq_len=40_960,
        dtype="bfloat16",
        remat_policy="full",
        **_QWEN3,
    ),
}


def get_preset(name: str, **overrides) -> ModelConfig:
    """Returns the named preset with `overrides` applied (ValueError on unknown names)."""
    if name not in PRESETS:
        raise ValueError(f"model.preset={name!r} is unknown; choose from {sorted(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown model field(s) {unknown}; valid: {sorted(fields)}")
    return dataclasses.replace(PRESETS[name], **overrides)
