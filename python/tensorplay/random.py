"""tensorplay.random: Philox generator state, fork_rng().

Owned by the tensor room (placeholder until it lands)."""
