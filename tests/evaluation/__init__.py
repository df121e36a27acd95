"""Tests of nemocascade.evaluation."""
