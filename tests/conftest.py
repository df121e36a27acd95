"""Test setup: every test runs on CPU with 8 fake devices.

One persistent XLA compilation cache serves the whole run: the xdist workers
and the CLI subprocesses share it (most tests compile the same toy steps), and
the controller deletes it at the end (docs/benchmarks.md, "Test suite").
"""

import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Set in the controller, inherited by the workers it starts; kept if the caller set one.
_OWN_XLA_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_XLA_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="nemocascade-test-xla-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Code verification fails closed without bubblewrap; on such a machine the
# suite opts in to the weaker backend explicitly (docs/security.md).
from nemocascade.rewards.sandbox import jail  # noqa: E402

if not jail.bwrap_works():
    os.environ.setdefault(jail.OVERRIDE_ENV, "rlimit")


def pytest_sessionfinish(session):
    if _OWN_XLA_CACHE and not hasattr(session.config, "workerinput"):  # the controller, last
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
