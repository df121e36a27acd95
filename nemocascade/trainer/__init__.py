"""Train state, optimizer, the pure train step, the host loop and the stages."""
