"""sharding."""
