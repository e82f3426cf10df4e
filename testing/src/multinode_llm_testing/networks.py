"""The one allocation of network-namespace name prefixes and subnets on a development machine.

Every namespace the local cluster, a suite or a benchmark makes is named ``<prefix>-<pod>`` and
sits on a /24 of its owner's; two runs that shared a prefix or a subnet would tear down each
other's pods or route to them. Each user takes its entry from this table, never a literal, and
``tests/unit/test_networks.py`` checks that no two entries overlap. ``lock`` says what keeps two
runs of the same user apart.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """A namespace-name prefix and a /24 (the real cluster's are larger). With ``slots``, one of
    each per slot number N: ``prefix`` and ``subnet`` hold ``{n}``. A ``subnet`` of "" is a prefix
    that makes no network; a ``prefix`` of "" is a network with no namespaces of its own."""

    user: str
    prefix: str
    subnet: str
    lock: str
    slots: range | None = None

    def at(self, n: int | None = None) -> tuple[str, ipaddress.IPv4Network]:
        """The prefix and the subnet (of slot ``n`` where the allocation has slots)."""
        if self.slots is None:
            if n is not None:
                raise ValueError(f"{self.user} has one network, not slots")
            return self.prefix, ipaddress.IPv4Network(self.subnet)
        if n not in self.slots:
            raise ValueError(f"{self.user}: slot {n} is not in {self.slots}")
        return self.prefix.format(n=n), ipaddress.IPv4Network(self.subnet.format(n=n))

    def every(self) -> list[tuple[str, ipaddress.IPv4Network | None]]:
        """Every prefix and subnet this allocation may use (for the overlap check)."""
        numbers: list[int | None] = list(self.slots) if self.slots is not None else [None]
        return [
            (
                self.prefix.format(n=n),
                ipaddress.IPv4Network(self.subnet.format(n=n)) if self.subnet else None,
            )
            for n in numbers
        ]


# 10.230.0.0/16: the local cluster and the suites that run it.
LOCAL_CLUSTER = Allocation(
    "multinode-llm-local's default --prefix and --subnet (multinode_llm_local.cluster)",
    "mnl",
    "10.230.0.0/24",
    lock="one local cluster per prefix: its state in /run/multinode-llm/mnl",
)
E2E_GROUPS = Allocation(
    "tests/e2e: one local cluster per slot",
    "mnl{n}",
    "10.230.{n}.0/24",
    lock="an abstract unix socket per slot (tests/e2e/groups.py)",
    slots=range(1, 100),
)
KUBELET_UNIT = Allocation(
    "tests/unit/test_kubelet.py: a real container per test process",
    "mnlu{n}",
    "10.230.{n}.0/24",
    lock="the slot is the test process's pid modulo 150",
    slots=range(100, 250),
)
CLI_E2E = Allocation(
    "tests/e2e/test_cli.py: refusals that must create nothing",
    "mnlcli",
    "10.230.250.0/24",
    lock="none needed: nothing is created",
)
PROMETHEUS_E2E = Allocation(
    "tests/e2e/test_prometheus.py: a plan without a network (service discovery only)",
    "mnlprom",
    "",
    lock="none needed: nothing is created",
)
# 10.231.0.0/16: the runtime's supervisors without the local cluster.
RUNTIME = Allocation(
    "tests/runtime: head and workers as pods",
    "mnrt1",
    "10.231.0.0/24",
    lock="/tmp/multinode-llm-runtime-net.lock",
)
# 10.232.0.0/16: the Hub cache's peers.
CACHE_PEERS = Allocation(
    "tests/cache/test_peers.py: four caches as peers",
    "mnc",
    "10.232.0.0/24",
    lock="/tmp/multinode-llm-cache-netns.lock",
)
# 10.233.0.0/16: the benchmarks, all under the bench lock.
BENCH_SERVING = Allocation(
    "bench/serving.py: our head and plain vLLM",
    "mnbs",
    "10.233.0.0/24",
    "/tmp/multinode-llm-bench.lock",
)
BENCH_LOCAL = Allocation(
    "bench/group.py: the local cluster's PP=2 group",
    "mnbl",
    "10.233.1.0/24",
    "/tmp/multinode-llm-bench.lock",
)
BENCH_CACHE = Allocation(
    "bench/cache_fanout.py: four cache peers",
    "mnbc",
    "10.233.2.0/24",
    "/tmp/multinode-llm-bench.lock",
)
# 10.234.0.0/16: unit tests that need one namespace.
NETNS_DNS_UNIT = Allocation(
    "tests/unit/test_netns_dns.py: one namespace's name lookups",
    "mnud",
    "10.234.0.0/24",
    lock="/tmp/multinode-llm-netns-dns.lock",
)

# 10.235.0.0/16 to 10.237.0.0/30: the real cluster (multinode_llm_local.controlplane.network), whose
# networks are larger than a /24: every node gets a /24 of the pods' /16.
REAL_CLUSTER_PODS = Allocation(
    "multinode-llm-local cluster: its pods, a /24 per node (tests/cluster)",
    "mnk",
    "10.235.0.0/16",
    lock="one real cluster at a time: /tmp/multinode-llm-real-cluster.lock",
)
REAL_CLUSTER_SERVICES = Allocation(
    "multinode-llm-local cluster: its Services' addresses (kube-proxy's, no namespaces)",
    "",
    "10.236.0.0/16",
    lock="the real cluster's",
)
REAL_CLUSTER_UPLINK = Allocation(
    "multinode-llm-local cluster: the veth pair between this machine and the nodes' host",
    "",
    "10.237.0.0/30",
    lock="the real cluster's",
)
REAL_CLUSTER = (REAL_CLUSTER_PODS, REAL_CLUSTER_SERVICES, REAL_CLUSTER_UPLINK)

ALLOCATIONS: tuple[Allocation, ...] = (
    LOCAL_CLUSTER,
    E2E_GROUPS,
    KUBELET_UNIT,
    CLI_E2E,
    PROMETHEUS_E2E,
    RUNTIME,
    CACHE_PEERS,
    BENCH_SERVING,
    BENCH_LOCAL,
    BENCH_CACHE,
    NETNS_DNS_UNIT,
    *REAL_CLUSTER,
)
