"""Evaluation: the domain × mode matrix and the cascade report."""
