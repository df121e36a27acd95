"""Audit hook and result checks of sandboxed children (stdlib only; runs in the jail).

`make_guard` builds the hook from values bound when it is created, before
any user code exists: the program may rebind module globals and builtins
(`isinstance`, `any`, `os.path.realpath`, these module's constants) without
changing what the hook checks. Paths are checked after resolving symlinks
and `..` with the hook's own `lstat`/`readlink`, so `/proc/self/../<pid>`
is caught; reads are allowed only under the Python install and a few device
files. `os.mkfifo`/`os.mknod` raise no audit event: the server deletes them
from `os` and the seccomp filter refuses the syscalls.
"""

from __future__ import annotations

import os


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


BLOCKED_MODULES = frozenset(
    words(
        "ctypes _ctypes socket _socket ssl _ssl subprocess _posixsubprocess multiprocessing "
        "_multiprocessing pty mmap fcntl _testcapi _testinternalcapi _testbuffer "
        "_testmultiphase _xxsubinterpreters _xxinterpchannels asyncio selectors"
    )
)
BLOCKED_EVENTS = frozenset(
    words(
        "os.system os.exec os.posix_spawn os.spawn os.fork os.forkpty os.kill os.killpg "
        "signal.pthread_kill subprocess.Popen resource.setrlimit resource.prlimit os.putenv "
        "os.unsetenv os.chmod os.chown os.chflags os.remove os.rmdir os.rename os.mkdir "
        "os.symlink os.link os.truncate os.utime os.setxattr os.removexattr "
        "tempfile.mkstemp tempfile.mkdtemp shutil.rmtree shutil.copyfile shutil.move "
        "sys._getframe sys._current_frames sys._current_exceptions sys.settrace "
        "sys.setprofile gc.get_objects gc.get_referrers gc.get_referents sys.addaudithook "
        "mmap.__new__ socket.__new__"
    )
)
_BLOCKED_PREFIXES = ("ctypes.", "socket.", "_thread.")
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_STD_FDS = (0, 1, 2)


def make_guard(read_roots: tuple[str, ...]):
    """An audit hook refusing processes, signals, sockets, ctypes, introspection,
    file writes and reads outside `read_roots` (checked on the resolved path)."""
    _type, _str, _bytes, _int, _tuple, _len, _any = type, str, bytes, int, tuple, len, any
    _denied, _lstat, _readlink, _getcwd = PermissionError, os.lstat, os.readlink, os.getcwd
    _events, _modules, _prefixes = BLOCKED_EVENTS, BLOCKED_MODULES, _BLOCKED_PREFIXES
    _frame_attrs, _write_flags, _std = _FRAME_ATTRS, _WRITE_FLAGS, _STD_FDS
    _roots = _tuple(read_roots)
    _link_mode = 0o120000

    def resolve(path) -> str:
        if _type(path) is _bytes:
            path = _bytes.decode(path, "utf-8", "surrogateescape")
        if _type(path) is not _str:
            raise _denied("blocked by sandbox: path of unsupported type")
        if not path.startswith("/"):
            # The audit event omits `dir_fd`: a relative path may be resolved by
            # the kernel from another directory than the cwd, so no `..` in it.
            if ".." in path.split("/"):
                raise _denied("blocked by sandbox: '..' in a relative path")
            path = _getcwd() + "/" + path
        parts, done, hops = path.split("/"), [], 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join([*done, part])
            try:
                is_link = (_lstat(candidate).st_mode & 0o170000) == _link_mode
            except OSError:
                is_link = False
            if not is_link:
                done.append(part)
                continue
            hops += 1
            if hops > 40:
                raise _denied("blocked by sandbox: symlink loop")
            target = _readlink(candidate)
            if target.startswith("/"):
                done = []
            parts = target.split("/") + parts
        return "/" + "/".join(done)

    def readable(path) -> bool:
        real = resolve(path)
        for root in _roots:  # noqa: SIM110 (`any` is a builtin the program may rebind)
            if real == root or real.startswith(root + "/"):
                return True
        return False

    def guard(event: str, args: tuple) -> None:
        if event in _events or event.startswith(_prefixes):
            raise _denied(f"blocked by sandbox: {event}")
        if event == "import" and _str(args[0]).partition(".")[0] in _modules:
            raise _denied(f"blocked by sandbox: import {args[0]}")
        if event == "object.__getattr__" and _len(args) > 1 and args[1] in _frame_attrs:
            raise _denied("blocked by sandbox: frame introspection")
        if event == "open":
            path, mode, flags = args
            writes = (_type(mode) is _str and _any(c in mode for c in "wax+")) or (
                _type(flags) is _int and flags & _write_flags
            )
            if _type(path) is _int:
                if writes and path not in _std:
                    raise _denied("blocked by sandbox: file write")
                return
            if writes:
                raise _denied("blocked by sandbox: file write")
            if not readable(path):
                raise _denied(f"blocked by sandbox: read outside the sandbox ({path!r})")
        if event in ("os.listdir", "os.scandir"):
            path = args[0]
            if path is None:
                path = "."
            if _type(path) is not _int and not readable(path):
                raise _denied("blocked by sandbox: listing outside the sandbox")

    return guard


# ----------------------------------------------------------------------------
# Children (one per program, or per stdin/stdout case).


def canonical(value, depth: int = 0):
    """Plain JSON data (None, bool, int, float, str, lists) or TypeError."""
    if depth > 20:
        raise TypeError("return value nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return [canonical(v, depth + 1) for v in value]
    raise TypeError(f"unsupported return type {type(value).__name__}")


def make_plain():
    """A function returning its argument if built only of exact builtin types.

    So `==` on what it returns is the builtin one (no always-equal objects).
    Everything it uses, itself included, is bound now: the program may
    rebind builtins and this module's globals later.
    """
    _type, _dict, _error = type, dict, TypeError
    _exact = (bool, int, float, complex, str, bytes, type(None))
    _seqs = (list, tuple, set, frozenset)

    def plain(value, depth=0):
        kind = _type(value)
        if kind in _exact:
            return value
        if depth < 50 and kind in _seqs:
            return kind([plain(v, depth + 1) for v in value])
        if depth < 50 and kind is _dict:
            return {plain(k, depth + 1): plain(v, depth + 1) for k, v in _dict.items(value)}
        raise _error("candidate returned a value that is not of a builtin type")

    return plain
