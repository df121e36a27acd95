"""The on-policy loop and its pieces, shared by the RL (GRPO, RLHF) and MOPD stages."""
