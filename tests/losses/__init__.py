"""Tests of nemocascade.losses."""
