"""Losses as pure array functions (float32 numerics, numerator/denominator outputs)."""
