"""Reward plug-ins used by test_plugins.py (imported by name, also in pool workers)."""

import time

from nemocascade.rewards import base


def answer_length(prompt, completion, example):
    """1 when the answer after </think> is at most 10 characters, else 0; info has the length."""
    del prompt, example
    _, answer = base.split_thinking(completion)
    if answer is None:
        return base.unfinished()
    return base.RewardResult(float(len(answer) <= 10), {"length": len(answer)})


def half(prompt, completion, example):
    del prompt, completion, example
    return 0.5


def hangs(prompt, completion, example):
    del prompt, example
    if completion == "hang":
        time.sleep(60)
    return 1.0


def returns_text(prompt, completion, example):
    del prompt, completion, example
    return "yes"


NOT_A_FUNCTION = 3
