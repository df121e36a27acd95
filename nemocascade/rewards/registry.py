"""Name -> verifier table; every entry has the `base.Verifier` signature.

Besides the built-in names, a name of the form `package.module:function` is a
reward plug-in (`rl.reward_fn`): the function is imported on first use (in
each verifier-pool worker too) and called with the verifier signature
`(prompt, completion, example)`; it returns a `base.RewardResult` or a number.
Like the built-in verifiers it sees the full completion (`base.split_thinking`
gives the answer after `</think>`).
"""

from __future__ import annotations

import functools
import importlib
import numbers

from nemocascade.rewards import base, swe_verifiers, verifiers

_VERIFIERS: dict[str, base.Verifier] = {
    "math": verifiers.math,
    "code": verifiers.code,
    "if": verifiers.instruction_following,
    # The gold chat rubric judges RLHF and evaluation; it is never a training reward.
    "chat_gold": verifiers.chat_gold,
    # SWE: the execution-free patch reward trains (C1 §4.7); the executed
    # hidden tests (resolved rate) are the domain's gold verifier for evaluation.
    "swe": swe_verifiers.swe,
    "swe_resolved": swe_verifiers.swe_resolved,
}
_BY_DOMAIN = {
    "math": "math",
    "code": "code",
    "if": "if",
    "chat": "chat_gold",
    "swe": "swe_resolved",
}


def names() -> tuple[str, ...]:
    return tuple(_VERIFIERS)


def is_plugin(name: str) -> bool:
    return ":" in name


@functools.cache
def load_plugin(spec: str) -> base.Verifier:
    """The verifier named by `package.module:function` (ValueError naming what is wrong)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"reward plug-in {spec!r}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"reward plug-in {spec!r}: cannot import {module_name!r}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward plug-in {spec!r}: {module_name} has no function {attr!r}")

    @functools.wraps(fn)
    def verifier(prompt, completion, example) -> base.RewardResult:
        result = fn(prompt, completion, example)
        if isinstance(result, base.RewardResult):
            return result
        if isinstance(result, numbers.Real) and not isinstance(result, bool):
            return base.RewardResult(float(result))
        raise TypeError(
            f"reward plug-in {spec!r} returned {type(result).__name__}; "
            "expected a RewardResult or a number"
        )

    return verifier


def get(name: str) -> base.Verifier:
    if is_plugin(name):
        return load_plugin(name)
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
