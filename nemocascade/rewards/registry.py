"""Name -> verifier table; every entry has the `base.Verifier` signature."""

from __future__ import annotations

from nemocascade.rewards import base, verifiers

_VERIFIERS: dict[str, base.Verifier] = {
    "math": verifiers.math,
    "code": verifiers.code,
    "if": verifiers.instruction_following,
    # The gold chat rubric judges RLHF and evaluation; it is never a training reward.
    "chat_gold": verifiers.chat_gold,
}
_BY_DOMAIN = {"math": "math", "code": "code", "if": "if", "chat": "chat_gold"}


def names() -> tuple[str, ...]:
    return tuple(_VERIFIERS)


def get(name: str) -> base.Verifier:
    if name not in _VERIFIERS:
        raise KeyError(f"unknown verifier {name!r}; valid: {', '.join(_VERIFIERS)}")
    return _VERIFIERS[name]


def name_for_domain(domain: str) -> str:
    if domain not in _BY_DOMAIN:
        raise KeyError(f"unknown domain {domain!r}; valid: {', '.join(_BY_DOMAIN)}")
    return _BY_DOMAIN[domain]


def for_domain(domain: str) -> base.Verifier:
    """The gold verifier of a task-world domain (chat -> chat_gold)."""
    return get(name_for_domain(domain))
