"""Tensor, dtypes, Size, creation functions, randomness, grad mode.

Owned by the tensor room (placeholder until it lands)."""
