"""nemocascade."""
