"""Tests of nemocascade.tasks."""
