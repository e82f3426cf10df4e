"""The one allocation of namespace prefixes and subnets: no two users can collide."""

from __future__ import annotations

import itertools

from multinode_llm_local import cluster
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_testing.networks import (
    ALLOCATIONS,
    LOCAL_CLUSTER,
    REAL_CLUSTER,
    REAL_CLUSTER_PODS,
    REAL_CLUSTER_SERVICES,
    REAL_CLUSTER_UPLINK,
)


def test_no_two_allocations_share_a_prefix_or_overlap_a_subnet() -> None:
    taken = [(a.user, prefix, subnet) for a in ALLOCATIONS for prefix, subnet in a.every()]
    for (user_a, prefix_a, subnet_a), (user_b, prefix_b, subnet_b) in itertools.combinations(
        taken, 2
    ):
        # Namespaces are named <prefix>-<pod>: equal prefixes are the only way names collide.
        assert not prefix_a or prefix_a != prefix_b, (user_a, user_b, prefix_a)
        if subnet_a and subnet_b:
            assert not subnet_a.overlaps(subnet_b), (user_a, user_b, subnet_a, subnet_b)


def test_each_network_is_a_slash_24_with_a_short_enough_prefix() -> None:
    for allocation in ALLOCATIONS:
        if allocation in REAL_CLUSTER:
            continue  # its own layout: the next test
        for prefix, subnet in allocation.every():
            assert subnet is None or subnet.prefixlen == 24, allocation.user
            # Link names are <prefix>-<pod> too, and Linux allows 15 characters.
            assert len(prefix) <= 7, allocation.user


def test_the_real_cluster_defaults_are_its_entries() -> None:
    network = ClusterNetwork()
    assert REAL_CLUSTER_PODS.at() == (network.prefix, network.pods)
    assert REAL_CLUSTER_SERVICES.at()[1] == network.services
    assert REAL_CLUSTER_UPLINK.at()[1] == network.uplink


def test_the_local_cluster_default_is_its_entry() -> None:
    prefix, subnet = LOCAL_CLUSTER.at()
    assert (prefix, str(subnet)) == (cluster.DEFAULT_PREFIX, cluster.DEFAULT_SUBNET)
