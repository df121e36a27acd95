"""Attack suite: hostile programs against every sandbox backend available here.

Each attack runs through the project's own API (`sandbox`, `code_tests`) and
must fail: no secret read, no file written, no connection made, no hook
switched off, no process surviving its time limit or its server, no user
namespace, no reward for a hack. bwrap runs when bubblewrap works here;
rlimit always (it is the explicit opt-in). docs/security.md lists them.
"""

import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from nemocascade.rewards import code_tests, sandbox
from nemocascade.rewards.sandbox import guard, jail, seccomp

BACKENDS = ["rlimit"] + (["bwrap"] if jail.bwrap_works() else [])
LIMITS = {"time_limit_s": 3.0, "memory_mb": 256, "max_output_bytes": 1 << 16}


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def attempt(source: str, backend: str, arg=None) -> dict:
    """The reply of `f(arg)` of `source`: {"value": ...} or {"error": ...}."""
    reply = sandbox.get(backend).call(source, "f", [[arg]], **LIMITS)
    return reply["outputs"][0] if "outputs" in reply else reply


def blocked(source: str, backend: str, arg=None) -> str:
    out = attempt(source, backend, arg)
    assert "error" in out, (source, out)
    return out["error"]


def _program_processes(box) -> int:
    """Processes running programs of `box`: of its uid (root trainer: the server runs
    as that uid too) or, for rlimit, of its server's session, the server excluded."""
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        info = jail._session_and_uid(pid)
        if info is None:
            continue
        if box.uid:
            found += info[1] == box.uid
        elif box.backend == "rlimit":
            found += info[0] == box.server_pid and int(pid) != box.server_pid
    return found - 1 if box.uid else found


def test_secrets_in_the_environment(backend, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("NEMOCASCADE_TEST_SECRET", secret)
    if backend in sandbox._SANDBOXES:  # restart the server after setting the secret
        sandbox._SANDBOXES.pop(backend).close()
    read = "def f(p):\n    return open(p, 'rb').read().decode('latin1')"
    out = attempt(
        "import os\ndef f(x):\n    return os.environ.get('NEMOCASCADE_TEST_SECRET')", backend
    )
    assert out == {"value": None}
    for path in (
        "/proc/self/environ",
        "/proc/1/environ",
        f"/proc/{os.getpid()}/environ",
        f"/proc/self/../{os.getpid()}/environ",
        f"/proc/self/root/proc/{os.getpid()}/environ",
        f"/proc/thread-self/../../{os.getpid()}/environ",
    ):
        assert secret not in blocked(read, backend, path)


def test_proc_of_other_processes(backend):
    cmdline = "def f(p):\n    return open(p, 'rb').read().decode('latin1')"
    blocked(cmdline, backend, f"/proc/{os.getpid()}/cmdline")
    blocked("import os\ndef f(x):\n    return os.listdir('/proc')", backend)
    blocked("import os\ndef f(x):\n    return [e.name for e in os.scandir('/proc')]", backend)


def test_host_files_are_unreadable(backend, tmp_path):
    secret = uuid.uuid4().hex
    planted = f"/tmp/nemocascade-planted-{uuid.uuid4().hex}"
    with open(planted, "w") as f:
        f.write(secret)
    os.chmod(planted, 0o644)
    try:
        read = "def f(p):\n    return open(p).read()"
        for path in (planted, "/etc/passwd", "/etc/hostname", "/root/.bashrc"):
            assert secret not in blocked(read, backend, path)
        blocked("import os\ndef f(x):\n    return os.listdir('/tmp')", backend)
        # dir_fd is not in the audit event: from a directory the hook allows,
        # a relative `..` path would climb out where the cwd says it stays in.
        escape = (
            "import os, sys\ndef f(x):\n    root = os.path.dirname(os.__file__)\n"
            "    os.chdir(root + '/json')\n    fd = os.open(root, os.O_RDONLY)\n"
            "    up = '../' * (root.count('/') - 1)\n"
            "    return os.read(os.open(up + 'etc/passwd', os.O_RDONLY, dir_fd=fd), 99)"
        )
        assert "root:" not in blocked(escape, backend)
    finally:
        os.remove(planted)


def test_hook_resolves_paths_and_refuses_relative_dotdot():
    hook = guard.make_guard(("/usr",))
    with pytest.raises(PermissionError, match="'..' in a relative path"):
        hook("open", ("../../etc/passwd", "r", 0))
    with pytest.raises(PermissionError, match="read outside the sandbox"):
        hook("open", ("/usr/../etc/passwd", "r", 0))
    hook("open", ("/usr/lib/../bin/env", "r", 0))  # resolves under /usr: allowed


def test_file_writes_incl_fifo(backend):
    name = f"/tmp/nemocascade-attack-{uuid.uuid4().hex}"
    for source in (
        "def f(p):\n    open(p, 'w').write('x')",
        "import os\ndef f(p):\n    os.close(os.open(p, os.O_CREAT | os.O_WRONLY))",
        "import os\ndef f(p):\n    os.mkfifo(p)",
        "import posix\ndef f(p):\n    posix.mkfifo(p)",
        "import os, stat\ndef f(p):\n    os.mknod(p, stat.S_IFIFO | 0o666)",
        "import importlib, posix\ndef f(p):\n    importlib.reload(posix).mkfifo(p)",
        "import os\ndef f(p):\n    os.link('/usr/bin/env', p)",
        "import os\ndef f(p):\n    os.symlink('/etc', p)",
        "import shutil\ndef f(p):\n    shutil.copyfile('/usr/bin/env', p)",
        "import tempfile\ndef f(p):\n    return tempfile.mkstemp()[1]",
    ):
        blocked(source, backend, name)
        assert not os.path.lexists(name), source


def test_network_incl_loopback(backend):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    for source in (
        "import socket\ndef f(p):\n    socket.create_connection(('127.0.0.1', p))",
        "import importlib\ndef f(p):\n    importlib.import_module('_socket').socket()",
        "import urllib.request\ndef f(p):\n    urllib.request.urlopen(f'http://127.0.0.1:{p}')",
        "import socket\ndef f(p):\n    return socket.getaddrinfo('example.com', 80)",
        "import asyncio\ndef f(p):\n    asyncio.run(asyncio.open_connection('127.0.0.1', p))",
    ):
        blocked(source, backend, port)
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()


TAMPER = """
import builtins, os, sys
for name in ('__main__', 'guard', 'server'):
    module = sys.modules.get(name)
    if module is not None:
        for attr in ('BLOCKED_EVENTS', 'BLOCKED_MODULES', '_BLOCKED_EVENTS', '_BLOCKED_MODULES'):
            setattr(module, attr, frozenset())
builtins.isinstance = lambda *a: False
builtins.any = lambda *a: False
builtins.str = lambda *a: ''
builtins.type = lambda *a: object
os.path.realpath = lambda p: sys.prefix
os.lstat = lambda p: None
os.getcwd = lambda: sys.prefix
"""


def test_hook_tampering(backend):
    name = f"/tmp/nemocascade-tamper-{uuid.uuid4().hex}"
    for attack in (
        "def f(p):\n    open(p, 'w').write('x')",
        "def f(p):\n    import socket\n    return socket.socket()",
        "def f(p):\n    import ctypes\n    return 1",
        f"def f(p):\n    return open('/proc/{os.getpid()}/environ').read()",
        "def f(p):\n    return open('/etc/passwd').read()",
        "def f(p):\n    import os\n    return os.system('true')",
    ):
        blocked(TAMPER + attack, backend, name)
        assert not os.path.lexists(name)


def test_frame_and_object_introspection(backend):
    for source in (
        "import sys\ndef f(x):\n    return str(sys._getframe(1).f_locals)",
        "def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n"
        "        return str(e.__traceback__.tb_frame.f_back.f_locals)",
        "import gc\ndef f(x):\n    return len(gc.get_objects())",
        "def f(x):\n    g = (i for i in [1])\n    return str(g.gi_frame.f_back)",
        "import sys\ndef f(x):\n    sys.settrace(lambda *a: None)",
    ):
        blocked(source, backend)


def test_orphans_die_at_the_time_limit(backend):
    box = sandbox.get(backend)
    source = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    source += "def f(x):\n    time.sleep(60)"
    reply = box.call(source, "f", [[1]], **{**LIMITS, "time_limit_s": 0.5})
    assert reply == {"error": "timeout"}
    time.sleep(0.2)
    assert _program_processes(box) == 0


def test_killing_its_own_server(backend):
    box = sandbox.get(backend)
    box.call("def f(x):\n    return x", "f", [[1]], **LIMITS)
    server_pid = box.server_pid
    for source in (
        "import os\ndef f(x):\n    os.kill(os.getppid(), 9)",
        "import os\ndef f(x):\n    os.killpg(0, 9)",
        "import signal, os\ndef f(x):\n    signal.pthread_kill(os.getppid(), 9)",
    ):
        blocked(source, backend)
        assert box.server_pid == server_pid
    # The server dying under a running program (as if killed) leaves no survivor.
    sleeper = "import time\ndef f(x):\n    time.sleep(60)"
    replies = []
    thread = threading.Thread(
        target=lambda: replies.append(
            box.call(sleeper, "f", [[1]], **{**LIMITS, "time_limit_s": 30})
        )
    )
    thread.start()
    time.sleep(1.0)
    uid, session = box.uid, box.server_pid
    os.kill(server_pid, 9)
    thread.join(timeout=20)
    assert replies and "sandbox server" in replies[0]["error"]
    time.sleep(0.2)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        info = jail._session_and_uid(pid)
        assert info is None or (info[0] != session and (not uid or info[1] != uid)), pid
    assert attempt("def f(x):\n    return x + 1", backend, 1) == {"value": 2}  # restarted


def test_user_namespaces(backend):
    for source in (
        "import ctypes\ndef f(x):\n    return ctypes.CDLL(None).unshare(0x10000000)",
        "import os\ndef f(x):\n    os.posix_spawn('/usr/bin/unshare', ['unshare', '-U'], {})",
        "import os\ndef f(x):\n    return os.fork()",
        "import os\ndef f(x):\n    os.execv('/usr/bin/unshare', ['unshare', '-U', 'true'])",
    ):
        blocked(source, backend)
    assert sandbox.get(backend).seccomp == "installed"


SECCOMP_PROBE = """
import ctypes, errno, os, sys
sys.path.insert(0, sys.argv[1])
import seccomp
assert seccomp.installer(seccomp.program())() == "installed"
libc = ctypes.CDLL(None, use_errno=True)
results = {}
for name, call in (
    ("unshare_user", lambda: libc.unshare(0x10000000)),
    ("unshare_net", lambda: libc.unshare(0x40000000)),
    ("mknod_fifo", lambda: libc.mknod(sys.argv[2].encode(), 0o010644, 0)),
    ("link", lambda: libc.link(b"/usr/bin/env", sys.argv[2].encode())),
    ("ptrace", lambda: libc.ptrace(16, os.getppid(), 0, 0)),
    ("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
):
    results[name] = (call(), ctypes.get_errno())
pid = os.fork()  # an ordinary fork still works
if pid == 0:
    os._exit(7)
results["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(results)
"""


@pytest.mark.skipif(seccomp.program() is None, reason="no seccomp filter for this architecture")
def test_seccomp_filter_refuses_namespaces_ptrace_mounts_fifos(tmp_path):
    target = str(tmp_path / "fifo")
    out = subprocess.run(
        [sys.executable, "-c", SECCOMP_PROBE, jail.server_dir(), target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    results = eval(out)  # noqa: S307 (our own probe's repr of a dict of ints)
    for name in ("unshare_user", "unshare_net", "mknod_fifo", "link", "ptrace", "mount"):
        assert results[name] == (-1, 1), (name, results)  # EPERM
    assert results["fork"] == 7
    assert not os.path.lexists(target)


@pytest.mark.parametrize("kind", ["call", "stdio"])
def test_correct_solutions_import_the_standard_library(backend, kind):
    """Also with Python installed under /root (as here when sys.base_prefix is there)."""
    imports = "import typing, statistics, fractions, decimal, heapq, bisect, dataclasses\n"
    mean = "float(statistics.mean([x, fractions.Fraction(1)]))"
    imports += "from collections import Counter\nfrom functools import lru_cache\n"
    if kind == "call":
        source = imports + f"def f(x):\n    return {mean}"
        meta = {"tests": {"fn_name": "f", "inputs": [[3]], "outputs": [2.0]}}
    else:
        source = imports + "x = int(input())\nprint(statistics.mean([x, fractions.Fraction(1)]))"
        meta = {"tests": {"inputs": ["3\n"], "outputs": ["2\n"]}}
    result = code_tests.run(source, meta, backend=backend)
    assert (result.passed, result.error) == (1, None)


def test_modules_outside_the_preload_import_on_bwrap():
    if "bwrap" not in BACKENDS:
        pytest.skip("bubblewrap does not work here")
    source = "import colorsys, fnmatch\ndef f(x):\n    return colorsys.rgb_to_hsv(1, 0, 0)[0] + x"
    assert attempt(source, "bwrap", 1) == {"value": 1.0}


CALL_META = {"tests": [[2, 7], [5, 16], [0, 1]], "func_name": "f"}
ASSERT_META = {
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\n    assert candidate(2, 2) == 4\n",
    "entry_point": "add",
}
FORGE = (
    "import os, json\nfor fd in range(3, 30):\n    for msg in ({{'passed': True}}, {payload}):\n"
    "        data = json.dumps(msg).encode()\n"
    "        try:\n            os.write(fd, len(data).to_bytes(4, 'big') + data)\n"
    "        except OSError:\n            pass\nos._exit(0)\n"
)
ALWAYS_EQUAL = "class A:\n    def __eq__(s, o):\n        return True\n    __hash__ = None\n"
HACKS = [
    (CALL_META, ALWAYS_EQUAL + "def f(x):\n    return A()"),
    (
        CALL_META,
        "class I(int):\n    def __eq__(s, o):\n        return True\ndef f(x):\n    return I(0)",
    ),
    (
        CALL_META,
        'import json\njson.dumps = lambda *a, **k: \'{"outputs": [{"value": 7}]*3}\'\n'
        "def f(x):\n    return 0",
    ),
    (CALL_META, FORGE.format(payload="{'outputs': [{'value': 7}, {'value': 16}, {'value': 1}]}")),
    (CALL_META, "print('PASS')\nprint('All tests passed')\ndef f(x):\n    return 0"),
    (CALL_META, "import sys\nsys.exit(0)"),
    (CALL_META, "import os\ndef f(x):\n    os._exit(0)"),
    (ASSERT_META, ALWAYS_EQUAL + "def add(a, b):\n    return A()"),
    (ASSERT_META, "import builtins\nbuiltins.abs = lambda x: 0\ndef add(a, b):\n    return 3"),
    (ASSERT_META, FORGE.format(payload="{'passed': True, 'nonce': '0' * 32}")),
    (ASSERT_META, "import sys\ndef add(a, b):\n    sys.exit(0)"),
    (ASSERT_META, "import os\ndef add(a, b):\n    os._exit(0)"),
    (ASSERT_META, "import sys\ndef add(a, b):\n    return sys._getframe(2).f_locals['nonce']"),
    (
        {"tests": {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}},
        FORGE.format(payload="{'i': 0, 'stdout': '2'}") + "print('PASS')",
    ),
    (
        {"tests": {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}},
        "import sys\nprint('2')\nsys.exit(0)",
    ),
]


@pytest.mark.parametrize(("meta", "source"), HACKS)
def test_reward_hacks_score_zero(backend, meta, source):
    result = code_tests.run(source, meta, backend=backend)
    assert result.passed < result.total, result


def test_the_sandbox_still_works_after_the_attacks(backend):
    assert attempt("def f(x):\n    return [x, x * 2]", backend, 3) == {"value": [3, 6]}
