"""Accelerator kernels, one folder per op (api, reference, chunked XLA, Pallas TPU/GPU)."""
