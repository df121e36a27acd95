"""Adversarial tests of the code sandbox, on every backend available here.

Each hostile program must score 0, leave this process unharmed and write
nothing outside the jail; afterwards the sandbox must still work.
"""

import os
import socket
import uuid

import pytest

from configs import stage3_long as stage3_config
from nemocascade import config as config_lib
from nemocascade.rewards import sandbox
from nemocascade.rewards.sandbox import jail

BACKENDS = ["rlimit"] + (["bwrap"] if jail.bwrap_works() else [])
OK = "def f(x):\n    return x + 1"


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def run(source, tests=((1, 2),), backend="rlimit", **kwargs):
    return sandbox.run_code(source, list(tests), backend=backend, **kwargs)


def assert_still_works(backend):
    outcome = run(OK, [(1, 2), (5, 6)], backend)
    assert (outcome.passed, outcome.total, outcome.error) == (2, 2, None)


def test_correct_and_wrong_programs(backend):
    outcome = run("def f(x):\n    return x * 3 + 1", [(2, 7), (5, 16), (0, 1)], backend)
    assert outcome.all_passed and outcome.backend == backend
    outcome = run("def f(x):\n    return x * 3", [(2, 7), (5, 15), (0, 0)], backend)
    assert (outcome.passed, outcome.all_passed) == (2, False)
    outcome = run("def f(x):\n    return sorted(x)[::-1]", [([3, 1, 2], [3, 2, 1])], backend)
    assert outcome.all_passed


def test_inputs_are_copies(backend):
    source = "def f(x):\n    x.append(9)\n    return len(x)"
    assert run(source, [([1], 2), ([1], 2)], backend).passed == 2


@pytest.mark.parametrize(
    ("source", "tests", "error"),
    [
        ("def f(x):\n    return True", [(1, 1)], None),  # bool is not int
        ("def f(x):\n    return 2.0", [(1, 2)], None),  # float is not int
        ("def f(x):\n    return (1, 2)", [(1, [1, 2])], None),  # tuples read as lists
        ("def f(x):\n    return {1}", [(1, [1])], "unsupported return type"),
        (
            "class A:\n    def __eq__(s, o):\n        return True\ndef f(x):\n    return A()",
            [(1, 1)],
            "unsupported",
        ),
        ("def g(x):\n    return x", [(1, 1)], "KeyError"),
        ("def f(x) return", [(1, 1)], "SyntaxError"),
        ("def f(x):\n    return 1 // 0", [(1, 1)], "ZeroDivisionError"),
        ("raise SystemExit(0)", [(1, 1)], "SystemExit"),
        ("import os\nos._exit(0)", [(1, 1)], "exited without a result"),
    ],
)
def test_strict_results(backend, source, tests, error):
    outcome = run(source, tests, backend)
    expected_pass = source.endswith("return (1, 2)")
    assert outcome.all_passed == expected_pass
    if error:
        assert error in outcome.error


def test_infinite_loop_times_out(backend):
    outcome = run("def f(x):\n    while True:\n        pass", backend=backend, timeout_s=0.5)
    assert outcome.passed == 0 and outcome.error == "timeout"
    outcome = run("import time\ndef f(x):\n    time.sleep(60)", backend=backend, timeout_s=0.5)
    assert outcome.error == "timeout"
    assert_still_works(backend)


def test_memory_bomb(backend):
    outcome = run("def f(x):\n    return len(bytearray(8 << 30))", [(1, 8 << 30)], backend)
    assert outcome.passed == 0 and "MemoryError" in outcome.error
    assert_still_works(backend)


def test_fork_bomb(backend):
    source = "import os\ndef f(x):\n    while True:\n        os.fork()"
    outcome = run(source, backend=backend)
    assert outcome.passed == 0 and "blocked" in outcome.error
    assert_still_works(backend)


def test_huge_output(backend):
    outcome = run("def f(x):\n    return 'a' * (50 << 20)", [(1, "a")], backend)
    assert outcome.passed == 0 and outcome.error == "output limit exceeded"
    outcome = run("def f(x):\n    print('a' * (50 << 20))\n    return 2", [(1, 2)], backend)
    assert outcome.all_passed  # stdout goes to /dev/null, not to the pipe
    assert_still_works(backend)


def test_environment_secrets_are_invisible(backend, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("NEMOCASCADE_TEST_SECRET", secret)
    if backend in sandbox._SANDBOXES:  # restart the server after setting the secret
        sandbox._SANDBOXES.pop(backend).close()
    source = "import os\ndef f(x):\n    return os.environ.get('NEMOCASCADE_TEST_SECRET')"
    assert run(source, [(1, secret)], backend).passed == 0
    source = "def f(x):\n    return open(f'/proc/{x}/environ', 'rb').read().decode('latin1')"
    outcome = run(source, [(os.getpid(), secret)], backend)
    assert outcome.passed == 0 and outcome.error


def test_network_is_unreachable(backend):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    source = (
        "import socket\ndef f(x):\n"
        "    socket.create_connection(('127.0.0.1', x)).send(b'hi')\n    return 1"
    )
    outcome = run(source, [(port, 1)], backend)
    assert outcome.passed == 0 and "blocked" in outcome.error
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()


def test_no_writes_to_home(backend, tmp_path):
    target = os.path.join(os.path.expanduser("~"), f"sandbox-{uuid.uuid4().hex}.txt")
    for source in (
        "def f(x):\n    open(x, 'w').write('pwned')\n    return 1",
        "import os\ndef f(x):\n    fd = os.open(x, os.O_CREAT | os.O_WRONLY)\n    return 1",
    ):
        outcome = run(source, [(target, 1)], backend)
        assert outcome.passed == 0
        assert not os.path.exists(target)


def test_killing_the_parent_fails(backend):
    outcome = run(
        "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    return 1", backend=backend
    )
    assert outcome.passed == 0
    assert_still_works(backend)


def test_ctypes_segfault(backend):
    outcome = run("import ctypes\ndef f(x):\n    return ctypes.string_at(0)", backend=backend)
    assert outcome.passed == 0 and "blocked" in outcome.error
    # A real segmentation fault (faulthandler's test hook) kills only the child.
    outcome = run("import faulthandler\ndef f(x):\n    faulthandler._sigsegv()", backend=backend)
    assert outcome.passed == 0 and outcome.error == "crashed (signal 11)"
    assert_still_works(backend)


def test_server_death_is_recovered(backend):
    box = sandbox.Sandbox(backend)
    reply = box.run(OK, [1], func_name="f", timeout_s=1, memory_mb=256, max_output_bytes=1024)
    assert reply == {"outputs": [{"value": 2}]}
    # A root host's server runs as its own uid, so RLIMIT_NPROC binds its children.
    assert box.server_uid == (box.uid if os.getuid() == 0 else os.getuid())
    assert box.uid == 0 or box.uid >= jail.UID_BASE
    os.kill(box._proc.pid, 9)
    box._proc.wait()
    reply = box.run(OK, [1], func_name="f", timeout_s=1, memory_mb=256, max_output_bytes=1024)
    assert reply == {"outputs": [{"value": 2}]}
    box.close()


def test_unknown_backend():
    with pytest.raises(ValueError, match="valid: bwrap, rlimit"):
        sandbox.run_code(OK, [(1, 2)], backend="docker")


def test_backend_can_be_forced(monkeypatch):
    monkeypatch.delenv(jail.OVERRIDE_ENV, raising=False)
    monkeypatch.setenv(sandbox.BACKEND_ENV, "rlimit")
    assert sandbox.available_backend() == "rlimit"
    monkeypatch.setenv(sandbox.BACKEND_ENV, "docker")
    with pytest.raises(ValueError, match="valid: bwrap, rlimit"):
        sandbox.available_backend()


def test_fails_closed_without_bubblewrap(monkeypatch):
    monkeypatch.delenv(sandbox.BACKEND_ENV, raising=False)
    monkeypatch.delenv(jail.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(jail, "bwrap_works", lambda: False)
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.available_backend()
    with pytest.raises(sandbox.SandboxUnavailable, match="sandbox.backend=rlimit"):
        sandbox.configure("bwrap", needed=True)
    sandbox.configure("bwrap", needed=False)  # no code domain: no check
    sandbox.configure("rlimit", needed=True)  # the explicit opt-in
    assert sandbox.available_backend() == "rlimit"
    monkeypatch.setenv(jail.OVERRIDE_ENV, "rlimit")  # an operator's choice wins
    sandbox.configure("bwrap", needed=True)
    assert sandbox.available_backend() == "rlimit"


def test_config_names_the_field():
    cd = stage3_config.get_config("tiny")
    cd["sandbox"]["backend"] = "docker"
    with pytest.raises(config_lib.ConfigError, match="config.sandbox.backend='docker'"):
        config_lib.from_config_dict(cd)
    cd["sandbox"]["backend"] = "rlimit"
    assert config_lib.from_config_dict(cd).sandbox.backend == "rlimit"


def test_code_stage_fails_closed_and_notes_the_weak_backend(monkeypatch, tmp_path):
    from nemocascade.evaluation import report
    from nemocascade.trainer.onpolicy import rewarders

    monkeypatch.delenv(jail.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(jail, "bwrap_works", lambda: False)
    cfg = config_lib.from_config_dict(stage3_config.get_config("tiny"))
    assert "code" in cfg.rl.domains and cfg.sandbox.backend == "bwrap"
    with pytest.raises(config_lib.ConfigError, match="config.sandbox.backend=bwrap: .*bubblewrap"):
        rewarders.make(cfg, str(tmp_path), None, None, None)
    monkeypatch.setenv(jail.OVERRIDE_ENV, "rlimit")
    rewarder = rewarders.make(cfg, str(tmp_path), None, None, None)
    rewarder.close()
    assert os.path.exists(tmp_path / cfg.stage / sandbox.WEAK_BACKEND_NOTE)
    with open(report.write(str(tmp_path), [cfg.stage])) as f:
        text = f.read()
    assert f"WARNING: {cfg.stage} ran model-written code on the weaker rlimit" in text
