"""One module per stage kind: sft, rm, rl (RLHF and RLVR stages), distill."""
