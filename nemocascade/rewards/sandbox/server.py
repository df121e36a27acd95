"""Jail side of the sandbox: a server that forks one child per program (or per case).

Run as `python -I -S server.py --uid N` inside the jail (stdlib only; the
host imports it just for the wire format). Requests arrive as frames on
stdin, results leave as frames on stdout. Three kinds of request:

* `call`: one child execs the program and calls `func_name(*args)` for each
  argument list; the values go back as plain JSON data and the host compares
  them with the expected outputs, which never enter the jail;
* `stdio`: one child per case with the case's input on fd 0 (a memfd) and
  its stdout captured by the server; the host compares the text;
* `assert`: one child execs the program, then the test code (in a namespace
  with a snapshot of the builtins taken before the program ran) and
  `check(candidate)`, where `candidate` returns only exact builtin types. A
  pass is a frame carrying a per-run nonce that lives only in the server's
  stack, which the program cannot inspect (frame and gc introspection are
  blocked), so writing a fake frame to the result pipe gains nothing.

Layers around each child: its own process group inside the server's session,
rlimits (CPU, address space, no new processes, file size, open files, no
core), stdio redirected, and an audit hook that closes over everything it
uses, so the program can rebind globals and builtins without effect.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time

if __package__:  # imported by the host (for the wire format)
    from nemocascade.rewards.sandbox import guard
else:  # run as a script inside the jail, next to its sibling modules
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import guard  # noqa: I001
    import seccomp

    sys.path.pop(0)

_FRAME = struct.Struct(">I")


# Imported by the server before it drops privileges: solutions importing them
# work even when the interpreter lives where the sandbox uid cannot read
# (e.g. under /root). Later imports still pass the read check of the hook.
PRELOAD = guard.words(
    "math cmath itertools functools collections heapq bisect string re operator copy "
    "array enum numbers typing statistics fractions decimal datetime random dataclasses "
    "json textwrap calendar queue io abc contextlib types struct unicodedata hashlib "
    "time locale codecs keyword pprint difflib copyreg weakref graphlib zlib base64 binascii"
)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/etc/localtime")


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


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:200]
    except BaseException:  # a hostile __str__
        return type(exc).__name__


def _enter_child(request: dict, read_roots) -> None:
    """Limits, stdio and the audit hook of a fresh child, before any user code."""
    os.setpgid(0, 0)  # its own group inside the server's session (no setsid escape)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    cpu = int(request.get("total_time_s", request["time_limit_s"])) + 1
    memory = request["memory_mb"] << 20
    fsize = max(1 << 20, request["max_output_bytes"] + 1)
    for limit, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_NPROC, (0, 0)),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_NOFILE, (32, 32)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(limit, value)
    for module in (os, sys.modules.get("posix")):  # not audited; seccomp blocks them too
        for name in ("mkfifo", "mknod"):
            with contextlib.suppress(AttributeError):
                delattr(module, name)
    sys.addaudithook(guard.make_guard(read_roots))


def _child_call(request: dict, result_fd: int, read_roots) -> None:
    _enter_child(request, read_roots)
    try:
        namespace = {"__name__": "__sandbox__", "__builtins__": builtins}
        exec(compile(request["source"], "<program>", "exec"), namespace)
        fn = namespace[request["func_name"]]
        outputs = []
        for args in request["args"]:
            try:
                outputs.append({"value": guard.canonical(fn(*json.loads(json.dumps(args))))})
            except BaseException as exc:
                outputs.append({"error": _describe(exc)})
        payload = {"outputs": outputs}
    except BaseException as exc:
        payload = {"error": _describe(exc)}
    write_frame(result_fd, payload)


def _child_assert(request: dict, result_fd: int, read_roots, nonce: str) -> None:
    """Program, then `check(candidate)` in a namespace of its own.

    The test sees pristine builtins, the helpers of the trusted `prompt_code`
    (HumanEval tests call e.g. `poly` or `encode_cyclic` from the prompt;
    without prompt code, the program's names) and the entry point only as
    `candidate`, whose results must be exact builtin types.
    """
    _enter_child(request, read_roots)
    pristine, to_plain, entry = dict(vars(builtins)), guard.make_plain(), request["entry_point"]
    try:
        program = compile(request["source"], "<program>", "exec")
        test = compile(request["test"], "<test>", "exec")
        helpers = compile(request.get("prompt_code") or "", "<prompt>", "exec")
        namespace = {"__name__": "__sandbox__", "__builtins__": builtins}
        exec(program, namespace)
        fn = namespace[entry]

        def candidate(*args, **kwargs):
            return to_plain(fn(*args, **kwargs))

        test_namespace = {} if request.get("prompt_code") else dict(namespace)
        test_namespace.update(__name__="__test__", __builtins__=pristine)
        exec(helpers, test_namespace)
        test_namespace[entry] = candidate
        exec(test, test_namespace)
        test_namespace["check"](candidate)
        payload = {"passed": True, "nonce": nonce}
    except BaseException as exc:
        payload = {"error": _describe(exc)}
    write_frame(result_fd, payload)


def _child_stdio(request: dict, result_fd: int, read_roots, first: int) -> None:
    """Runs the program on cases `first`, `first + 1`, ... in turn, one frame per case.

    Each case gets a fresh namespace, its input on fd 0 and an empty memfd on
    fd 1 (so `open(0)`, `os.read(0, n)` and `os.write(1, b)` work too).
    """
    _enter_child(request, read_roots)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the size limit: EFBIG, not death
    memfd, dup2, lseek, read, close = os.memfd_create, os.dup2, os.lseek, os.read, os.close
    text_io, file_io, limit = io.TextIOWrapper, io.FileIO, request["max_output_bytes"]
    try:
        program = compile(request["source"], "<program>", "exec")
    except BaseException as exc:
        write_frame(result_fd, {"i": first, "error": _describe(exc)})
        return
    for i in range(first, len(request["inputs"])):
        for target in (0, 1):  # the program may have closed either: memfd then takes its number
            fd = memfd("stdio")
            if target == 0:
                os.write(fd, request["inputs"][i].encode())
                lseek(fd, 0, os.SEEK_SET)
            if fd != target:
                dup2(fd, target)
                close(fd)
        sys.stdin = sys.__stdin__ = text_io(file_io(0, "r", closefd=False))
        sys.stdout = sys.__stdout__ = text_io(file_io(1, "w", closefd=False))
        error = None
        try:
            exec(program, {"__name__": "__main__", "__builtins__": builtins})
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = f"exit status {exc.code!r}"[:200]
        except BaseException as exc:
            error = _describe(exc)
        try:
            sys.stdout.flush()
        except BaseException as exc:
            error = error or _describe(exc)
        lseek(1, 0, os.SEEK_SET)
        out = read(1, limit + 1)
        if len(out) > limit:
            error = "output limit exceeded"
        frame = (
            {"i": i, "error": error}
            if error
            else {"i": i, "stdout": out.decode("utf-8", "replace")}
        )
        write_frame(result_fd, frame)


def _fork(target, *args) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _collect(pid: int, fds: list[int], deadline: float, max_bytes: int):
    """Reads `fds` until EOF, the deadline or `max_bytes`; kills the child's group."""
    data = {fd: b"" for fd in fds}
    open_fds, error = list(fds), None
    while open_fds and error is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            error = "timeout"
            break
        for fd in select.select(open_fds, [], [], remaining)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
            data[fd] += chunk
            if len(data[fd]) > max_bytes:
                error = "output limit exceeded"
    _kill_group(pid)  # also reaps anything the program left behind
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return [data[fd] for fd in fds], status, error


def _exit_reason(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"crashed (signal {os.WTERMSIG(status)})"
    return f"exited without a result (status {os.waitstatus_to_exitcode(status)})"


def _run_program(request: dict, read_roots) -> dict:
    """`call` and `assert` requests: one child, one result frame."""
    read_fd, write_fd = os.pipe()
    nonce = os.urandom(16).hex()
    if request["kind"] == "assert":
        pid = _fork(_child_assert, request, write_fd, read_roots, nonce)
    else:
        pid = _fork(_child_call, request, write_fd, read_roots)
    os.close(write_fd)
    deadline = time.monotonic() + request["time_limit_s"]
    (data,), status, error = _collect(pid, [read_fd], deadline, request["max_output_bytes"])
    if error is not None:
        return {"error": error}
    try:
        reply = json.loads(data[_FRAME.size :]) if data else {"error": _exit_reason(status)}
    except ValueError:
        return {"error": _exit_reason(status)}
    if request["kind"] == "assert" and "error" not in reply:
        # Only the harness knows the nonce; a frame without it was written by the program.
        passed = type(reply) is dict and reply.get("nonce") == nonce
        return {"passed": True} if passed else {"error": "forged result"}
    return reply


def _run_stdio(request: dict, read_roots) -> dict:
    """`stdio` requests: a child runs the cases in turn; after a timeout or crash
    a fresh child continues with the next case, within the total budget."""
    inputs, per_case = request["inputs"], request["time_limit_s"]
    results: list = [None] * len(inputs)
    end, first = time.monotonic() + request["total_time_s"], 0
    frame_limit = request["max_output_bytes"] + 4096
    while first < len(inputs):
        if time.monotonic() >= end:
            results[first:] = [{"error": "skipped (total time limit)"}] * (len(inputs) - first)
            break
        read_fd, write_fd = os.pipe()
        pid = _fork(_child_stdio, request, write_fd, read_roots, first)
        os.close(write_fd)
        buf, error, deadline = b"", None, min(end, time.monotonic() + per_case)
        while error is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([read_fd], [], [], remaining)[0]:
                error = "timeout"
                break
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= _FRAME.size and error is None:
                size = _FRAME.unpack(buf[: _FRAME.size])[0]
                if size > frame_limit:
                    error = "output limit exceeded"
                elif len(buf) >= _FRAME.size + size:
                    frame = json.loads(buf[_FRAME.size : _FRAME.size + size])
                    buf = buf[_FRAME.size + size :]
                    if type(frame) is not dict or frame.get("i") != first:
                        error = "malformed case result"
                        break
                    results[first] = {k: v for k, v in frame.items() if k != "i"}
                    first += 1
                    deadline = min(end, time.monotonic() + per_case)
                else:
                    break
        _kill_group(pid)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        if first < len(inputs) and results[first] is None:
            results[first] = {"error": error or _exit_reason(status)}
            first += 1
    return {"outputs": results}


# ----------------------------------------------------------------------------
# Server start-up and loop.


def _read_roots() -> tuple[str, ...]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots |= {os.path.dirname(os.path.realpath(os.__file__))}
    return tuple(sorted(roots)) + _DEVICES


def _start(uid: int) -> dict:
    """Preloads, drops root to `uid`, installs the seccomp filter (before serving)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    builtins.exit = builtins.quit = sys.exit  # absent under -S; solutions call exit()
    read_roots = _read_roots()  # resolved while the install is still readable
    seccomp_state = "unavailable (no ctypes)"
    with contextlib.suppress(ImportError):
        seccomp_state = _seccomp_loader()
    if os.getuid() == 0 and uid > 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if seccomp_state == "ready":
        seccomp_state = _SECCOMP.pop()()
    for name in list(sys.modules):  # a cached module would skip the import audit
        if name.partition(".")[0] in guard.BLOCKED_MODULES or name == "seccomp":
            del sys.modules[name]
    return {"ready": True, "uid": os.getuid(), "seccomp": seccomp_state}, read_roots


_SECCOMP: list = []


def _seccomp_loader() -> str:
    """Prepares the seccomp installer (imports ctypes while still privileged)."""
    program = seccomp.program()
    if program is None:
        return f"unsupported architecture {os.uname().machine}"
    _SECCOMP.append(seccomp.installer(program))
    return "ready"


def serve(uid: int) -> None:
    """Server loop: one request frame in, one result frame out, until EOF."""
    hello, read_roots = _start(uid)
    write_frame(1, hello)
    while (request := read_frame(0)) is not None:
        if request.get("kind") == "stdio":
            write_frame(1, _run_stdio(request, read_roots))
        else:
            write_frame(1, _run_program(request, read_roots))


if __name__ == "__main__":
    serve(int(sys.argv[sys.argv.index("--uid") + 1]) if "--uid" in sys.argv else 0)
