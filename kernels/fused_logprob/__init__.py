"""fused_logprob."""
