"""Tests of nemocascade.data."""
