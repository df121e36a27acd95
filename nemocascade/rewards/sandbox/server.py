"""Sandbox for untrusted model code: a jailed server that forks one child per program.

Spawning a fresh jailed interpreter per program costs tens of milliseconds,
so each host process keeps one long-lived *server* inside the jail; the
server (this file run as `python -I -S sandbox.py`, stdlib only) receives
programs over a pipe and forks a child per program. Layers, outermost first:

* jail: `bwrap` (new mount/pid/net/ipc/uts namespaces, read-only binds of the
  system and the Python install only, private /tmp, cleared environment,
  dies with its parent), or, when bubblewrap is missing, the weaker `rlimit`
  backend (own session, scrubbed environment, no isolation of files or
  network; a warning is logged);
* privileges: a server started as root drops to `nobody` before serving, so
  RLIMIT_NPROC is enforced (the kernel exempts root) and host files are
  unreadable/unwritable;
* per child: its own process group, rlimits (CPU seconds, address space, no
  new processes, file size, open files, no core), stdio on /dev/null, and an
  audit hook that blocks process, signal, socket, ctypes and file-write APIs;
* the server kills the child's group at the wall-clock deadline and reads at
  most `max_output_bytes` of its result; the host kills an unresponsive server.

Only test *inputs* enter the jail; expected outputs stay on the host, which
compares the returned values strictly (a forged result gains nothing).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import json
import os
import resource
import select
import signal
import struct
import sys
import time

NOBODY = 65534
_FRAME = struct.Struct(">I")
# Modules solutions may use; imported before dropping root (later imports
# from a root-only install would fail) and shared by every forked child.
_PRELOAD = ("math", "itertools", "functools", "collections", "heapq", "bisect", "string", "re")
_BLOCKED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "subprocess.Popen",
        "socket.__new__",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "resource.setrlimit",
        "resource.prlimit",
        "os.putenv",
        "os.chmod",
        "os.chown",
        "os.remove",
        "os.rename",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.truncate",
    }
)
_BLOCKED_MODULES = frozenset(
    {"ctypes", "_ctypes", "socket", "_socket", "ssl", "_ssl", "subprocess"}
    | {"_posixsubprocess", "multiprocessing", "_multiprocessing", "pty", "mmap", "fcntl"}
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


# ----------------------------------------------------------------------------
# Wire format shared by host and server: 4-byte length + JSON.


def write_frame(fd: int, obj) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError("sandbox server did not answer in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(fd: int, deadline: float | None = None):
    """One frame, or None at end of stream."""
    header = _read_exact(fd, _FRAME.size, deadline)
    if header is None:
        return None
    body = _read_exact(fd, _FRAME.unpack(header)[0], deadline)
    return None if body is None else json.loads(body)


# ----------------------------------------------------------------------------
# Server and child side (runs inside the jail; stdlib only).


def _guard(event: str, args: tuple) -> None:
    """Audit hook of a child: refuses dangerous runtime operations."""
    if event in _BLOCKED_EVENTS:
        raise PermissionError(f"blocked by sandbox: {event}")
    if event == "import" and str(args[0]).partition(".")[0] in _BLOCKED_MODULES:
        raise PermissionError(f"blocked by sandbox: import {args[0]}")
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes:
            raise PermissionError("blocked by sandbox: file write")
        # Other processes' /proc entries hold their environment and memory.
        if (
            isinstance(path, str)
            and path.startswith("/proc/")
            and not path.startswith("/proc/self")
        ):
            raise PermissionError("blocked by sandbox: /proc")


def _canonical(value, depth: int = 0):
    """Plain JSON data (None, bool, int, float, str, lists) or TypeError."""
    if depth > 20:
        raise TypeError("return value nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return [_canonical(v, depth + 1) for v in value]
    raise TypeError(f"unsupported return type {type(value).__name__}")


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:200]
    except BaseException:  # a hostile __str__
        return type(exc).__name__


def _child(request: dict, result_fd: int) -> None:
    """Runs one program in a forked child and writes its outputs (never returns)."""
    os.setsid()
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    cpu = int(request["timeout_s"]) + 1
    memory = request["memory_mb"] << 20
    for limit, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_NPROC, (0, 0)),
        (resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)),
        (resource.RLIMIT_NOFILE, (32, 32)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(limit, value)
    sys.addaudithook(_guard)
    outputs: list = []
    try:
        namespace = {"__name__": "__sandbox__", "__builtins__": builtins}
        exec(compile(request["source"], "<program>", "exec"), namespace)
        fn = namespace[request["func_name"]]
        for arg in request["inputs"]:
            try:
                outputs.append({"value": _canonical(fn(json.loads(json.dumps(arg))))})
            except BaseException as exc:
                outputs.append({"error": _describe(exc)})
        payload = {"outputs": outputs}
    except BaseException as exc:
        payload = {"error": _describe(exc)}
    try:
        write_frame(result_fd, payload)
    finally:
        os._exit(0)


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _run_one(request: dict) -> dict:
    """Forks a child for one program; enforces wall time and output size."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            _child(request, write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    deadline = time.monotonic() + request["timeout_s"]
    data, error = b"", None
    while error is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([read_fd], [], [], remaining)[0]:
            error = "timeout"
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) > request["max_output_bytes"]:
            error = "output limit exceeded"
    _kill_group(pid)  # also reaps anything the program left behind
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if error is not None:
        return {"error": error}
    try:
        return json.loads(data[_FRAME.size :]) if data else {"error": _exit_reason(status)}
    except ValueError:
        return {"error": _exit_reason(status)}


def _exit_reason(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"crashed (signal {os.WTERMSIG(status)})"
    return f"exited without a result (status {os.waitstatus_to_exitcode(status)})"


def _drop_root() -> None:
    for name in _PRELOAD:
        __import__(name)
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def serve() -> None:
    """Server loop: one request frame in, one result frame out, until EOF."""
    _drop_root()
    write_frame(1, {"ready": True, "uid": os.getuid()})
    while (request := read_frame(0)) is not None:
        write_frame(1, _run_one(request))


# ----------------------------------------------------------------------------
# Host side. subprocess/shutil/threading are imported lazily so the jailed
# server never has them loaded (a cached module bypasses the import audit).


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of running one program on its tests."""

    passed: int
    total: int
    error: str | None
    backend: str

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


_BACKEND: list[str] = []
BACKEND_ENV = "NEMOCASCADE_SANDBOX_BACKEND"


def _python() -> str:
    """The interpreter binary inside the base install (not a venv link)."""
    exe = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    return exe if os.path.exists(exe) else os.path.realpath(sys.executable)


def _bwrap_command() -> list[str]:
    import shutil

    root = os.getuid() == 0
    cmd = [shutil.which("bwrap") or "/usr/bin/bwrap"]
    for path in ("/usr", "/lib", "/lib64", "/bin"):
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--ro-bind", os.path.realpath(__file__), "/sandbox/server.py"]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    cmd += ["--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin"]
    if root:
        # Root needs no user namespace; it keeps only the capabilities to
        # drop to nobody (inside a user namespace root would stay kernel
        # root, which RLIMIT_NPROC exempts).
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        cmd += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all"]
    return [*cmd, _python(), "-I", "-S", "/sandbox/server.py"]


def _command(backend: str) -> list[str]:
    if backend == "bwrap":
        return _bwrap_command()
    if backend == "rlimit":
        return [_python(), "-I", "-S", os.path.realpath(__file__)]
    raise ValueError(f"unknown sandbox backend {backend!r}; valid: bwrap, rlimit")


def available_backend() -> str:
    """'bwrap' when bubblewrap works here, else 'rlimit' (probed once).

    $NEMOCASCADE_SANDBOX_BACKEND forces one (inherited by pool workers).
    """
    forced = os.environ.get(BACKEND_ENV)
    if forced:
        _command(forced)  # validates the name
        return forced
    if not _BACKEND:
        import shutil
        import subprocess

        backend = "rlimit"
        if shutil.which("bwrap"):
            probe = _bwrap_command()[:-4] + ["/bin/true"]
            result = subprocess.run(probe, capture_output=True, timeout=30, check=False)
            backend = "bwrap" if result.returncode == 0 else "rlimit"
        _BACKEND.append(backend)
    return _BACKEND[0]


class Sandbox:
    """One jailed server; thread-safe, restarted on death or hang."""

    def __init__(self, backend: str | None = None, startup_timeout_s: float = 30.0):
        import threading

        self.backend = backend or available_backend()
        self._startup_timeout_s = startup_timeout_s
        self._lock = threading.Lock()
        self._proc = None
        self.server_uid: int | None = None

    def _start(self) -> None:
        import logging
        import subprocess

        if self.backend == "rlimit":
            logging.getLogger(__name__).warning(
                "bubblewrap unavailable: the rlimit sandbox backend is weaker "
                "(no filesystem, network or pid isolation)"
            )
        self._proc = subprocess.Popen(
            _command(self.backend),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            start_new_session=True,
        )
        hello = read_frame(self._proc.stdout.fileno(), time.monotonic() + self._startup_timeout_s)
        if not hello or not hello.get("ready"):
            self.close()
            raise RuntimeError(f"sandbox server ({self.backend}) failed to start")
        self.server_uid = hello["uid"]

    def run(
        self,
        source: str,
        inputs: list,
        *,
        func_name: str,
        timeout_s: float,
        memory_mb: int,
        max_output_bytes: int,
    ) -> dict:
        """Outputs of `func_name` on `inputs`: {"outputs": [...]} or {"error": ...}."""
        request = {
            "source": source,
            "inputs": inputs,
            "func_name": func_name,
            "timeout_s": timeout_s,
            "memory_mb": memory_mb,
            "max_output_bytes": max_output_bytes,
        }
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                write_frame(self._proc.stdin.fileno(), request)
                # The server enforces the deadline; this margin only catches
                # a server that is itself stuck or dead.
                reply = read_frame(self._proc.stdout.fileno(), time.monotonic() + timeout_s + 5.0)
            except (TimeoutError, OSError) as exc:
                self.close()
                return {"error": f"sandbox server failed: {exc}"}
            if reply is None:
                self.close()
                return {"error": "sandbox server exited"}
            return reply

    def close(self) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid)
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                stream.close()
            self._proc = None


_SANDBOXES: dict[str, Sandbox] = {}


def _same(got, expected) -> bool:
    """Strict equality of plain data: 1 != True != 1.0, tuples read as lists."""
    return json.dumps(got) == json.dumps(_canonical(expected))


def run_code(
    source: str,
    tests: list,
    *,
    func_name: str = "f",
    timeout_s: float = 2.0,
    memory_mb: int = 512,
    max_output_bytes: int = 1 << 20,
    backend: str | None = None,
) -> Outcome:
    """Runs `source` in the sandbox and checks `func_name(input) == expected` per test.

    `tests` is a list of (input, expected) pairs of plain data; `timeout_s`
    bounds the wall time of the whole program (all tests together).
    """
    backend = backend or available_backend()
    if backend not in _SANDBOXES:
        _SANDBOXES[backend] = Sandbox(backend)
    reply = _SANDBOXES[backend].run(
        source,
        [x for x, _ in tests],
        func_name=func_name,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_bytes=max_output_bytes,
    )
    outputs = reply.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(tests):
        return Outcome(0, len(tests), str(reply.get("error", "malformed result")), backend)
    passed, error = 0, None
    for out, (_, expected) in zip(outputs, tests, strict=True):
        if isinstance(out, dict) and "value" in out and _same(out["value"], expected):
            passed += 1
        elif error is None and isinstance(out, dict) and "error" in out:
            error = str(out["error"])
    return Outcome(passed, len(tests), error, backend)


if __name__ == "__main__":
    serve()
