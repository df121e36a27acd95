"""Tests of the kernels/ package."""
