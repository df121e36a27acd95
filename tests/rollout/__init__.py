"""Tests of nemocascade.rollout and the generate CLI."""
