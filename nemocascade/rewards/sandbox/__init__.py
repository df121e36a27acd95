"""Sandbox for untrusted model code: host side of a jailed server per process.

Spawning a fresh jailed interpreter per program costs tens of milliseconds,
so each host process keeps one long-lived server inside the jail
(`server.py`, stdlib only) that forks a child per program, or per case of a
stdin/stdout program. Layers, outermost first: the jail (`jail.py`: bwrap,
or the explicitly chosen `rlimit` backend), a dedicated uid for a root
trainer, the seccomp filter (`seccomp.py`), and per child rlimits and an
audit hook the program cannot switch off. The server kills a child's group
at its deadline; the host kills a hung server and then every process left in
its session or owned by its uid.

Only test *inputs* enter the jail; expected outputs stay on the host, which
compares them (`nemocascade.rewards.code_tests`), so a forged result gains
nothing. See docs/security.md for what each backend does and does not stop.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import subprocess
import threading
import time

from nemocascade.rewards.sandbox import guard, jail, server
from nemocascade.rewards.sandbox.jail import BACKEND_ENV, SandboxUnavailable

__all__ = ["BACKEND_ENV", "Outcome", "Sandbox", "SandboxUnavailable", "available_backend"]

_log = logging.getLogger(__name__)
_UIDS = itertools.count()
_WARNED: set[str] = set()


def available_backend() -> str:
    """The backend code runs on: $NEMOCASCADE_SANDBOX_BACKEND or bwrap (fails closed)."""
    return jail.selected_backend()


def configure(backend: str, needed: bool = True) -> str | None:
    """Selects the backend for this process and the verifier workers it spawns.

    With `needed`, checks now that it works, so a missing bubblewrap stops a
    run before its first step instead of scoring every program 0, and
    returns the backend code will run on.
    """
    os.environ[BACKEND_ENV] = backend
    return jail.selected_backend() if needed else None


WEAK_BACKEND_NOTE = "SANDBOX_RLIMIT_WARNING.txt"


def note_weak_backend(stage_dir: str) -> None:
    """Leaves a note in a stage dir that ran code on rlimit (the report repeats it)."""
    _log.warning("THIS STAGE RUNS MODEL-WRITTEN CODE ON THE WEAKER rlimit SANDBOX BACKEND")
    if "://" not in stage_dir:
        os.makedirs(stage_dir, exist_ok=True)
        with open(os.path.join(stage_dir, WEAK_BACKEND_NOTE), "w") as f:
            f.write("Model-written code ran on the rlimit sandbox backend (docs/security.md).\n")


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


class Sandbox:
    """One jailed server; thread-safe, restarted on death or hang."""

    def __init__(self, backend: str | None = None, startup_timeout_s: float = 30.0):
        self.backend = backend or available_backend()
        jail.command(self.backend, 0)  # validates the name
        self._startup_timeout_s = startup_timeout_s
        self._lock = threading.Lock()
        self._proc = None
        self.uid = jail.UID_BASE + os.getpid() * 64 + next(_UIDS) % 64 if os.getuid() == 0 else 0
        self.server_uid: int | None = None
        self.seccomp: str | None = None

    def _start(self) -> None:
        if self.backend == "rlimit" and "rlimit" not in _WARNED:
            _WARNED.add("rlimit")
            _log.warning(
                "SANDBOX BACKEND rlimit CHOSEN EXPLICITLY: model-written code runs without "
                "namespaces (host files readable by its uid, host network reachable past the "
                "audit hook); for isolation %s",
                jail.INSTALL_HINT.partition(" or ")[0],
            )
        self._proc = subprocess.Popen(
            jail.command(self.backend, self.uid),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            start_new_session=True,
        )
        deadline = time.monotonic() + self._startup_timeout_s
        try:
            hello = server.read_frame(self._proc.stdout.fileno(), deadline)
        except TimeoutError:
            hello = None
        if not hello or not hello.get("ready"):
            self.close()
            raise RuntimeError(f"sandbox server ({self.backend}) failed to start")
        self.server_uid, self.seccomp = hello["uid"], hello["seccomp"]
        if self.seccomp != "installed" and self.seccomp not in _WARNED:
            _WARNED.add(self.seccomp)
            _log.warning("sandbox seccomp filter not installed: %s", self.seccomp)

    @property
    def server_pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def request(self, request: dict, wall_s: float) -> dict:
        """Sends one request; the reply, or {"error": ...} if the server failed."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                if self._proc is not None:
                    self.close()
                self._start()
            try:
                server.write_frame(self._proc.stdin.fileno(), request)
                # The server enforces the deadlines; this margin only catches
                # a server that is itself stuck or dead.
                deadline = time.monotonic() + wall_s + 5.0
                reply = server.read_frame(self._proc.stdout.fileno(), deadline)
            except (TimeoutError, OSError, ValueError) as exc:
                self.close()
                return {"error": f"sandbox server failed: {exc}"}
            if reply is None:
                self.close()
                return {"error": "sandbox server exited"}
            return reply

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
        """Outputs of `func_name(x)` for each x: {"outputs": [...]} or {"error": ...}."""
        return self.call(
            source,
            func_name,
            [[x] for x in inputs],
            time_limit_s=timeout_s,
            memory_mb=memory_mb,
            max_output_bytes=max_output_bytes,
        )

    def call(self, source: str, func_name: str, args: list[list], **limits) -> dict:
        """`func_name(*a)` for each argument list `a` (time limit: all calls together)."""
        request = {"kind": "call", "source": source, "func_name": func_name, "args": args}
        return self.request({**request, **limits}, limits["time_limit_s"])

    def stdio(self, source: str, inputs: list[str], *, total_time_s: float, **limits) -> dict:
        """stdout of the program per input: {"outputs": [{"stdout"|"error": ...}]}."""
        request = {"kind": "stdio", "source": source, "inputs": inputs}
        return self.request({**request, **limits, "total_time_s": total_time_s}, total_time_s)

    def check(
        self, source: str, test: str, entry_point: str, prompt_code: str = "", **limits
    ) -> dict:
        """HumanEval-style `check(entry_point)`: {"passed": True} or {"error": ...}."""
        request = {"kind": "assert", "source": source, "test": test, "entry_point": entry_point}
        request["prompt_code"] = prompt_code
        return self.request({**request, **limits}, limits["time_limit_s"])

    def close(self) -> None:
        if self._proc is not None:
            server._kill_group(self._proc.pid)
            self._proc.wait()
            jail.sweep(self._proc.pid, self.uid or None)
            for stream in (self._proc.stdin, self._proc.stdout):
                stream.close()
            self._proc = None


_SANDBOXES: dict[str, Sandbox] = {}


def get(backend: str | None = None) -> Sandbox:
    """This process's shared sandbox of `backend` (default: the configured one)."""
    backend = backend or available_backend()
    if backend not in _SANDBOXES:
        _SANDBOXES[backend] = Sandbox(backend)
    return _SANDBOXES[backend]


def same(got, expected) -> bool:
    """Strict equality of plain data: 1 != True != 1.0, tuples read as lists."""
    return json.dumps(got) == json.dumps(guard.canonical(expected))


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
    box = get(backend)
    reply = box.run(
        source,
        [x for x, _ in tests],
        func_name=func_name,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_bytes=max_output_bytes,
    )
    outputs = reply.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(tests):
        return Outcome(0, len(tests), str(reply.get("error", "malformed result")), box.backend)
    passed, error = 0, None
    for out, (_, expected) in zip(outputs, tests, strict=True):
        if isinstance(out, dict) and "value" in out and same(out["value"], expected):
            passed += 1
        elif error is None and isinstance(out, dict) and "error" in out:
            error = str(out["error"])
    return Outcome(passed, len(tests), error, box.backend)
