"""Hash split of the task world: SFT, RL-prompt and eval sets are disjoint.

The split of an example is a pure function of its domain and canonical prompt
(sha256 -> one of 100 buckets), so the same prompt can never land in two
splits, whatever seed or difficulty generated it.
"""

from __future__ import annotations

import hashlib

from nemocascade.tasks import base

# Upper bucket bound (exclusive) of each split, out of 100.
_BOUNDS = {"sft": 70, "rl": 90, "eval": 100}


def canonical(prompt: str) -> str:
    """Whitespace-normalized prompt: the identity of a task instance."""
    return " ".join(prompt.split())


def digest(domain: str, prompt: str) -> str:
    return hashlib.sha256(f"{domain}\x00{canonical(prompt)}".encode()).hexdigest()


def split_of(domain: str, prompt: str) -> str:
    """The one split this prompt belongs to."""
    bucket = int(digest(domain, prompt)[:8], 16) % 100
    for split in base.SPLITS:
        if bucket < _BOUNDS[split]:
            return split
    raise AssertionError("bounds cover every bucket")


def uid(domain: str, prompt: str) -> str:
    return f"{domain}-{digest(domain, prompt)[:16]}"
