"""Processes and rows: the multi-host facts every batched call needs, in one place.

On a multi-process mesh each process feeds its own rows of a global batch
(`rules.put_batch`), so every process must call a jitted function with the
same shapes, and reads back only its own rows of the result. Samplers and
frozen-model scorers (KL reference, MOPD teachers, the reward model) all do
the same four things, each defined once here:

* `local_batch_shards`: how many batch shards one process holds, so its local
  row count is a multiple of it;
* `pow2_bucket`: the row count of a call — a power of two times that
  multiple, so the number of compiled shapes stays logarithmic;
* `max_over_processes`: the agreed count (every process picks the largest);
* `local_rows`: this process's rows of a batch-sharded result.

With one process these are the identity (no collective is issued).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from nemocascade.sharding import rules as rules_lib


def local_batch_shards(mesh: jax.sharding.Mesh, rules: rules_lib.Rules) -> int:
    """Batch shards per process: every process's local batch is a multiple of it."""
    dp = rules_lib.batch_shards(mesh, rules)
    if dp % jax.process_count():
        raise ValueError(
            f"the data-parallel size data*fsdp = {dp} must be a multiple of the "
            f"{jax.process_count()} processes (each feeds its own rows)"
        )
    return max(1, dp // jax.process_count())


def pow2_bucket(n: int, multiple: int = 1, cap: int | None = None) -> int:
    """The smallest power of two ≥ n, rounded up to a multiple of `multiple`.

    With `cap` (a shape that is always valid, e.g. the whole batch) the result
    is at most `cap`.
    """
    b = 1 << max(n - 1, 0).bit_length()
    b = -(-b // multiple) * multiple
    return b if cap is None else min(b, cap)


def max_over_processes(values: Any) -> Any:
    """Elementwise max over processes of an int or integer array (identity on one)."""
    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    out = np.asarray(multihost_utils.process_allgather(np.asarray(values))).max(axis=0)
    return int(out) if np.ndim(values) == 0 else out


def local_rows(tree: Any, mesh: jax.sharding.Mesh, rules: rules_lib.Rules) -> Any:
    """This process's rows of batch-sharded arrays, as host numpy (all of them on one)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        specs = jax.tree.map(lambda x: rules_lib.batch_sharding(mesh, rules, x.ndim).spec, tree)
        tree = multihost_utils.global_array_to_host_local_array(tree, mesh, specs)
    return jax.tree.map(np.asarray, jax.device_get(tree))
