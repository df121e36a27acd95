"""Test setup: every test runs on CPU with 8 fake devices."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Code verification fails closed without bubblewrap; on such a machine the
# suite opts in to the weaker backend explicitly (docs/security.md).
from nemocascade.rewards.sandbox import jail  # noqa: E402

if not jail.bwrap_works():
    os.environ.setdefault(jail.OVERRIDE_ENV, "rlimit")
