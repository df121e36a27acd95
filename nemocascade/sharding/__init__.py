"""Mesh construction and the logical→mesh sharding rules (the one place for sharding)."""
