"""Dotted `section.field=value` overrides of a config file, outside the flag parser.

A sweep names fields the way the command line does (`optim.lr=3e-6`), but it
has to check every value of every run before the first one starts, and it
hands each run to `nemocascade.main` as `--config.` flags. This module does the
three steps as pure functions: parse `key=v1,v2;key=v` text, apply values to a
copy of a config file's ConfigDict (then `nemocascade.config.from_config_dict`
checks types and ranges), and render values back as flags. An unknown path is
rejected by name, with the field it most likely meant, in one line:
`unknown field config.rl.lr (did you mean config.optim.lr?)`.
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from ml_collections import config_dict

from nemocascade import config as config_lib

_OPEN, _CLOSE = "([{", ")]}"


def split_top_level(text: str, sep: str) -> list[str]:
    """Splits at `sep` outside brackets and quotes, so "('a','b'),('c',)" keeps its tuples."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_value(raw: str) -> Any:
    """A Python literal (`3e-6`, `True`, `('math',)`) or, failing that, the bare string."""
    raw = raw.strip()
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def parse(text: str) -> list[tuple[str, list[Any]]]:
    """'optim.lr=1e-6,3e-6;rl.group_size=4' → [("optim.lr", [1e-6, 3e-6]), ("rl.group_size", [4])].

    ';' separates fields and ',' values; a key may appear once.
    """
    out: list[tuple[str, list[Any]]] = []
    for item in split_top_level(text, ";"):
        if not item:
            continue
        key, sep, values = item.partition("=")
        key = key.strip().removeprefix("config.")
        if not sep or not key or not values.strip():
            raise config_lib.ConfigError(f"expected 'section.field=value[,value...]', got {item!r}")
        if any(k == key for k, _ in out):
            raise config_lib.ConfigError(f"config.{key} is given twice")
        raw = split_top_level(values, ",")
        if any(not r for r in raw):
            raise config_lib.ConfigError(f"config.{key} has an empty value in {values!r}")
        out.append((key, [parse_value(r) for r in raw]))
    return out


def parse_single(text: str) -> dict[str, Any]:
    """Like `parse`, but one value per field (a tuple value needs its brackets)."""
    out = {}
    for key, values in parse(text):
        if len(values) != 1:
            raise config_lib.ConfigError(
                f"config.{key} takes one value here, got {len(values)}; write a tuple as ('a','b')"
            )
        out[key] = values[0]
    return out


def field_paths(cd: config_dict.ConfigDict, prefix: str = "") -> list[str]:
    """Every leaf field of `cd` as a dotted path."""
    out = []
    for name, value in cd.items():
        path = f"{prefix}{name}"
        if isinstance(value, config_dict.ConfigDict):
            out += field_paths(value, f"{path}.")
        else:
            out.append(path)
    return out


def suggest(cd: config_dict.ConfigDict, key: str) -> str | None:
    """The field `key` most likely meant: the same name in another section, or a near spelling."""
    paths = field_paths(cd)
    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == leaf]
    if len(same_leaf) == 1:
        return same_leaf[0]
    close = difflib.get_close_matches(key, paths, n=1, cutoff=0.8)
    return close[0] if close else None


def _unknown(cd: config_dict.ConfigDict, key: str) -> config_lib.ConfigError:
    hint = suggest(cd, key)
    return config_lib.ConfigError(
        f"unknown field config.{key}" + (f" (did you mean config.{hint}?)" if hint else "")
    )


def check_key(cd: config_dict.ConfigDict, key: str) -> None:
    """Raises ConfigError unless `key` names a leaf field of `cd`."""
    node: Any = cd
    for part in key.split("."):
        if not isinstance(node, config_dict.ConfigDict) or part not in node:
            raise _unknown(cd, key)
        node = node[part]
    if isinstance(node, config_dict.ConfigDict):
        raise config_lib.ConfigError(f"config.{key} is a section; set one of its fields")


def apply(cd: config_dict.ConfigDict, overrides: Mapping[str, Any]) -> config_dict.ConfigDict:
    """A copy of `cd` with `overrides` set; unknown fields and wrong types fail by name."""
    cd = copy.deepcopy(cd)
    for key, value in overrides.items():
        check_key(cd, key)
        *parents, leaf = key.split(".")
        node = cd
        for part in parents:
            node = node[part]
        current = node[leaf]
        if isinstance(current, tuple) and isinstance(value, (str, list)):
            # As the flag parser does: a bare string is a 1-tuple.
            value = (value,) if isinstance(value, str) else tuple(value)
        try:
            node[leaf] = value
        except (TypeError, ValueError):
            kind = type(current).__name__ if current is not None else node.get_type(leaf).__name__
            raise config_lib.ConfigError(f"config.{key} must be {kind}, got {value!r}") from None
    return cd


def build(cd: config_dict.ConfigDict, overrides: Mapping[str, Any]) -> config_lib.Config:
    """`apply` + the full validation of `nemocascade.config` (types, ranges, stage)."""
    return config_lib.from_config_dict(apply(cd, overrides))


def parse_per_stage(text: str, path: str) -> dict[str, dict[str, Any]]:
    """'stage.section.field=value;...' (the cascade's form) → {stage: {"section.field": value}}.

    `path` names the setting in errors (`config.cascade.set`). Values parse as
    on the command line (`parse_value`); `apply` checks the fields.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in filter(None, (x.strip() for x in split_top_level(text, ";"))):
        key, sep, raw = item.partition("=")
        stage, dot, field = key.strip().partition(".")
        if not sep or not dot or "." not in field:
            raise config_lib.ConfigError(
                f"{path}: expected 'stage.section.field=value', got {item!r}"
            )
        out.setdefault(stage, {})[field] = parse_value(raw.strip())
    return out


def load_stage_config(stage: str, size: str) -> config_dict.ConfigDict:
    """The ConfigDict of `configs/<stage>.py:<size>` (the cascade's stage configs)."""
    module = importlib.import_module(f"configs.{stage}")
    try:
        return module.get_config(size)
    except ValueError as e:
        raise config_lib.ConfigError(f"configs/{stage}.py:{size}: {e}") from None


def format_value(value: Any) -> str:
    """The text the `--config.` flag parser reads back as `value`."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        value = tuple(value)
    return repr(value)


def to_flags(overrides: Mapping[str, Any]) -> list[str]:
    return [f"--config.{k}={format_value(v)}" for k, v in overrides.items()]


def load_config_file(spec: str) -> config_dict.ConfigDict:
    """'configs/stage2_medium.py:tiny' → that file's `get_config('tiny')` (as `--config=` does)."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise config_lib.ConfigError(f"--config: no such file {path!r}")
    module_spec = importlib.util.spec_from_file_location("_nemocascade_config_file", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    try:
        return module.get_config(arg) if arg else module.get_config()
    except ValueError as e:
        raise config_lib.ConfigError(f"--config={spec}: {e}") from None
