"""Tests of nemocascade.rewards."""
