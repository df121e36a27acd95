"""nemocascade: Cascade RL post-training (SFT, RM, RLHF, domain-wise RLVR, MOPD) in JAX/Flax."""
