"""Rows and processes: call buckets, per-process batch shards, and the one-process identities."""

import jax
import numpy as np
import pytest

from nemocascade.sharding import hosts, mesh as mesh_lib, rules as rules_lib


def test_pow2_bucket():
    assert hosts.pow2_bucket(1) == 1
    assert hosts.pow2_bucket(5) == 8
    assert hosts.pow2_bucket(1, 8, cap=64) == 8
    assert hosts.pow2_bucket(9, 8, cap=64) == 16
    assert hosts.pow2_bucket(40, 8, cap=48) == 48  # the whole batch is always a valid shape
    assert hosts.pow2_bucket(64, 8, cap=64) == 64
    assert hosts.pow2_bucket(5, 3) == 9  # 8 rounded up to the multiple


@pytest.mark.parametrize(
    "shape, rule_set, shards", [((1, 8, 1), "fsdp", 8), ((2, 2, 2), "fsdp_tp", 4)]
)
def test_local_batch_shards_never_count_tensor(shape, rule_set, shards):
    mesh = mesh_lib.make_mesh(shape)
    assert hosts.local_batch_shards(mesh, rules_lib.get_rules(rule_set)) == shards


def test_one_process_identities():
    assert hosts.max_over_processes(3) == 3
    np.testing.assert_array_equal(hosts.max_over_processes(np.array([1, 4])), [1, 4])
    mesh = mesh_lib.make_mesh((1, 8, 1))
    rules = rules_lib.get_rules("fsdp")
    x = rules_lib.put_batch({"x": np.arange(16).reshape(8, 2)}, mesh, rules)["x"]
    local = hosts.local_rows(x, mesh, rules)
    assert isinstance(local, np.ndarray)
    np.testing.assert_array_equal(local, np.arange(16).reshape(8, 2))
    assert jax.process_count() == 1
