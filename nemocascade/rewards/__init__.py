"""Rewards: verifiers behind one signature, the verifier pool and the code sandbox."""
