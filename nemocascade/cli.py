"""absl flags for the command-line tools that are also importable (`generate`, `convert`, ...).

`main` and `sweep` own the process-wide `absl.flags.FLAGS`; a tool that is
also called as a library (`generate.run(generate.parse_args([...]))`) gets a
fresh `flags.FlagValues` per parse instead, so two tools never collide and
parsing twice in one process works. Same behaviour as the rest: `--flagfile`,
`--name=value` or `--name value`, and a bad flag is one line naming it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Sequence

from absl import flags


class UsageError(ValueError):
    """A flag value is unusable; the message names the flag."""


def parse(
    prog: str,
    define: Callable[[flags.FlagValues], None],
    argv: Sequence[str] | None,
    required: Sequence[str] = (),
) -> types.SimpleNamespace:
    """Parses `argv` (without the program name; None = `sys.argv[1:]`) into a namespace.

    `define(fv)` registers the tool's flags on `fv`. A flag named `from` (a
    Python keyword) is available as the attribute `source`.
    """
    fv = flags.FlagValues()
    define(fv)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        fv([prog, *argv])
    except flags.Error as e:
        raise UsageError(str(e)) from None
    missing = [name for name in required if fv[name].value is None]
    if missing:
        raise UsageError(", ".join(f"--{m} is required" for m in missing))
    values = {name: fv[name].value for name in fv}
    values.pop("flagfile", None)
    values.pop("undefok", None)
    if "from" in values:
        values["source"] = values.pop("from")
    return types.SimpleNamespace(**values)


def exit_on_usage_error(prog: str, fn: Callable, *args):
    """`fn(*args)`, turning a UsageError into `prog: message` and exit status 2."""
    try:
        return fn(*args)
    except UsageError as e:
        sys.exit(f"{prog}: {e}")
