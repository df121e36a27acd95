"""One line for faults of the environment, the traceback only on request.

A full disk, an unwritable or mistyped workdir, a damaged export or a garbage
safetensors file are not bugs of the program (nor is a NaN loss or reward,
whose message names the last good checkpoint): the user needs the cause, not
hundreds of lines of orbax and tensorstore frames with the cause somewhere in
the middle. The entry points (`main`, `sweep`, `generate`, `convert`) run under
`one_line(prog)`, which turns the exceptions `describe` knows into

    nemocascade.main: no space left on device: /runs/x/sft/checkpoints (errno 28, ENOSPC)

on stderr and exit status 1. `--verbose` (or absl `-v 1`, or a root logger at
DEBUG) prints the traceback first. Anything `describe` does not know is a bug
and keeps its traceback; so does a ConfigError, which the entry points
already report in one line of their own.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence

from absl import flags

VERBOSE_FLAG = "--verbose"
_VERBOSE = flags.DEFINE_bool(
    "verbose", False, "Print the traceback of an environment fault, not only its one-line cause."
)

# errno → what to say; the path follows.
_ERRNO = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a path component is a file, not a directory",
    errno.EEXIST: "exists and is not a directory",
    errno.EISDIR: "is a directory, expected a file",
    errno.ENOENT: "no such file or directory",
}
# The same faults as text, when a library re-raised them without the errno.
_TEXT = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "Permission denied": errno.EACCES,
}


def _chain(e: BaseException) -> Iterator[BaseException]:
    """`e`, then its causes/contexts and the members of exception groups, each once."""
    seen, todo = set(), [e]
    while todo:
        x = todo.pop(0)
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        todo += [x.__cause__, x.__context__, *getattr(x, "exceptions", ())]


def _os_line(e: OSError) -> str:
    what = _ERRNO.get(e.errno, e.strerror or type(e).__name__)
    if e.strerror and e.strerror.startswith(os.strerror(e.errno) + ": "):
        what = e.strerror[len(os.strerror(e.errno)) + 2 :]  # our own, more specific text
        what = f"{_ERRNO.get(e.errno, os.strerror(e.errno))} ({what})"
    path = e.filename if e.filename is not None else ""
    code = errno.errorcode.get(e.errno, "")
    return (
        f"{what}: {path} (errno {e.errno}, {code})" if path else f"{what} (errno {e.errno}, {code})"
    )


def describe(e: BaseException) -> str | None:
    """The one-line cause of an environment fault, or None for anything else (a bug)."""
    # Imported here so that the entry points can define --verbose before jax loads.
    from nemocascade import checkpointing
    from nemocascade.trainer import loop

    chain = list(_chain(e))
    for x in chain:  # the most specific first: our own messages name the path
        if isinstance(x, (checkpointing.CheckpointError, loop.NonFiniteError)):
            return str(x)
        if isinstance(x, FileNotFoundError) and x.errno is None:
            return str(x)  # raised with our own message: "no exported params under …"
    for x in chain:
        if isinstance(x, OSError) and x.errno in _ERRNO:
            return _os_line(x)
    for x in chain:
        if type(x).__name__ == "SafetensorError":
            return f"unreadable safetensors file ({checkpointing.first_line(x)})"
        text = str(x)
        for needle, code in _TEXT.items():
            if needle in text:
                return f"{_ERRNO[code]} ({checkpointing.first_line(x)})"
    return None


def split_verbose(argv: Sequence[str] | None) -> tuple[list[str] | None, bool]:
    """argparse entry points: `argv` without `--verbose`, and whether it was there."""
    args = list(sys.argv[1:] if argv is None else argv)
    return [a for a in args if a != VERBOSE_FLAG], VERBOSE_FLAG in args


class _OneLineLibraryErrors(logging.Filter):
    """Library error records (orbax's save threads, asyncio) cut to one line, once per site.

    A full disk fails every pending write of an async checkpoint save, and each
    logs its own traceback from a background thread before the main thread
    learns of it; without this the cause sits in the middle of hundreds of lines.
    """

    _NOISY = ("/orbax/", "/asyncio/", "/tensorstore/")

    def __init__(self):
        super().__init__()
        self._seen: set[tuple[str, int]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not any(n in record.pathname for n in self._NOISY):
            return True
        site = (record.pathname, record.lineno)
        if site in self._seen:
            return False
        self._seen.add(site)
        text = record.getMessage().strip().splitlines()
        record.msg, record.args = (text[0][:200] if text else ""), None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def _closed_loop_hook(default):
    """sys.excepthook that drops asyncio's 'Event loop is closed' (a consequence, not a cause).

    When a save fails, orbax closes its event loop while tensorstore still has
    write callbacks queued; each then reports this error from C++ through
    sys.excepthook, one traceback per callback.
    """

    def hook(kind, value, tb):
        if kind is RuntimeError and str(value) == "Event loop is closed":
            return
        default(kind, value, tb)

    hook.closed_loop_hook = True
    return hook


def _quiet_library_errors() -> None:
    if not getattr(sys.excepthook, "closed_loop_hook", False):
        sys.excepthook = _closed_loop_hook(sys.excepthook)
    root = logging.getLogger()
    if not any(isinstance(f, _OneLineLibraryErrors) for h in root.handlers for f in h.filters):
        quiet = _OneLineLibraryErrors()
        for handler in root.handlers:
            handler.addFilter(quiet)


def _verbose() -> bool:
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        return True
    if not flags.FLAGS.is_parsed():
        return False
    return _VERBOSE.value or flags.FLAGS["verbosity"].value >= 1


@contextlib.contextmanager
def one_line(prog: str, *, verbose: bool = False, context: str = "") -> Iterator[None]:
    """Runs the body; an environment fault exits with `prog: cause[ (context)]`.

    `context` names what was being read (`--from_hf=DIR`) where the fault's
    own message cannot. SystemExit and KeyboardInterrupt pass through.
    Unless verbose, error records of orbax and asyncio are cut to one line
    each (from here on, for the rest of the process).
    """
    if not (verbose or _verbose()):
        _quiet_library_errors()
    try:
        yield
    except Exception as e:
        line = describe(e)
        if line is None:
            raise
        line = f"{prog}: {line}" + (f" ({context})" if context else "")
        if verbose or _verbose():
            traceback.print_exc()
        else:
            line += f" [{VERBOSE_FLAG} for the traceback]"
        sys.exit(line)
