"""Backends of the sandbox: the command that starts a server, and the cleanup.

* `bwrap` (default): bubblewrap with new mount/pid/net/ipc/uts namespaces
  (and a user namespace that cannot create further ones when the trainer is
  not root), read-only binds of the system libraries and the Python install
  only, private /tmp and /dev, cleared environment, `--die-with-parent`,
  `--new-session`; all capabilities dropped except the two a root server
  needs to drop to its uid.
* `rlimit` (explicit opt-in only): the same server and audit hook without
  namespaces. Host files readable by the sandbox uid stay readable at the
  kernel level (the hook allows reads only under the Python install), and
  the host network is reachable once code gets past the hook.

On both, a root trainer runs programs as a dedicated uid (`UID_BASE` plus a
per-sandbox offset: no other process owns it, so RLIMIT_NPROC binds and no
other process can be signalled), and the server installs the seccomp filter
of `seccomp.py`. Without bubblewrap the default configuration refuses to run
code (`SandboxUnavailable`) instead of quietly weakening the isolation.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys

BACKENDS = ("bwrap", "rlimit")
BACKEND_ENV = "NEMOCASCADE_SANDBOX_BACKEND"
# Set by an operator (or the test suite on a machine without bubblewrap): wins
# over the config, so it is an explicit choice too.
OVERRIDE_ENV = "NEMOCASCADE_SANDBOX_BACKEND_OVERRIDE"
UID_BASE = 1_600_000_000
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: "
    "dnf install bubblewrap; Arch: pacman -S bubblewrap; conda: conda install -c "
    "conda-forge bubblewrap) or accept the weaker backend explicitly with "
    "--config.sandbox.backend=rlimit"
)


class SandboxUnavailable(RuntimeError):
    """No isolating backend here and none explicitly opted out of."""


def python() -> str:
    """The interpreter binary inside the base install (not a venv link)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    exe = os.path.join(sys.base_prefix, "bin", version)
    return exe if os.path.exists(exe) else os.path.realpath(sys.executable)


def server_dir() -> str:
    return os.path.dirname(os.path.realpath(__file__))


def bwrap_command(uid: int) -> list[str]:
    cmd = [shutil.which("bwrap") or "/usr/bin/bwrap"]
    for path in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    for prefix in sorted(
        {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(python()))}
    ):
        if not prefix.startswith("/usr/"):
            # bwrap would create the parents (e.g. /root) mode 0700, which the
            # sandbox uid cannot traverse: the standard library would not import.
            parents = []
            parent = os.path.dirname(prefix)
            while parent != "/":
                parents.insert(0, parent)
                parent = os.path.dirname(parent)
            for parent in parents:
                cmd += ["--perms", "0755", "--dir", parent]
            cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--ro-bind", server_dir(), "/sandbox"]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    cmd += ["--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin"]
    if os.getuid() == 0:
        # A root trainer needs no user namespace: the server keeps only the
        # capabilities to drop to its dedicated uid, which RLIMIT_NPROC binds
        # (inside a user namespace it would stay root, which the kernel exempts).
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        cmd += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all", "--unshare-user", "--disable-userns"]
    return [*cmd, python(), "-I", "-S", "/sandbox/server.py", "--uid", str(uid)]


def rlimit_command(uid: int) -> list[str]:
    return [python(), "-I", "-S", os.path.join(server_dir(), "server.py"), "--uid", str(uid)]


def command(backend: str, uid: int) -> list[str]:
    if backend == "bwrap":
        return bwrap_command(uid)
    if backend == "rlimit":
        return rlimit_command(uid)
    raise ValueError(f"unknown sandbox backend {backend!r}; valid: {', '.join(BACKENDS)}")


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap is installed and may create its namespaces here (probed once)."""
    if not shutil.which("bwrap"):
        return False
    probe = bwrap_command(0)[:-6] + ["/bin/true"]
    try:
        result = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def selected_backend() -> str:
    """The backend: $NEMOCASCADE_SANDBOX_BACKEND_OVERRIDE, else the configured one
    ($NEMOCASCADE_SANDBOX_BACKEND), else bwrap.

    Raises SandboxUnavailable when it is bwrap and bubblewrap does not work here.
    """
    backend = os.environ.get(OVERRIDE_ENV) or os.environ.get(BACKEND_ENV) or "bwrap"
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "bwrap" and not bwrap_works():
        raise SandboxUnavailable(
            f"code execution needs bubblewrap, which does not work here: {INSTALL_HINT}"
        )
    return backend


def _session_and_uid(pid: str) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        if fields[0] == b"Z":  # a zombie: dead already, waiting for its reaper
            return None
        return int(fields[3]), os.stat(f"/proc/{pid}").st_uid
    except (OSError, ValueError, IndexError):
        return None


def sweep(session: int, uid: int | None) -> int:
    """SIGKILLs every process in `session` or owned by `uid`: the number killed.

    Run after a server dies or is closed, so no program outlives its server
    (children stay in the server's session: as group leaders they cannot
    `setsid`, and they cannot fork).
    """
    killed = 0
    for _ in range(3):  # processes seen mid-exit may be listed again
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            info = _session_and_uid(pid)
            if info is None or int(pid) == os.getpid():
                continue
            if info[0] == session or (uid is not None and info[1] == uid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
    return killed
