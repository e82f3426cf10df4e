"""The real cluster's network: one namespace that is the nodes' host, and one per pod.

The cluster's network lives in the host namespace ``<prefix>-host``: the control plane's
processes, kube-proxy's iptables rules, and the bridge ``cbr0`` that every pod's veth hangs on.
It is joined to this machine's own namespace by one veth pair (``<prefix>-up``), so that helm,
kubectl, the tests and the node daemon (which stays in this namespace: the pods' namespaces it
makes must be seen from here) reach the API server, the pods and the Services by routes, and the
pods reach an address of this machine's (the uplink's) where a test serves something; nothing else
is forwarded (this machine's own ip_forward stays as it is). Deleting the host namespace takes
its bridge, its rules and its routes with it: ``destroy`` leaves nothing behind, even after a crash.

Addresses (``ClusterNetwork``'s defaults, kept apart from every other network of this project by
``multinode_llm_testing.networks``): pods 10.235.0.0/16 (each node's /24 from the controller
manager's node-IPAM), Services 10.236.0.0/16 (``kubernetes`` .1, ``kube-dns`` .10), the uplink
10.237.0.0/30, and the bridge, which the API server advertises, at 10.235.255.254.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from multinode_llm_local.netns import NETNS_ETC, ip, namespaces_with_prefix, require_root

BRIDGE = "cbr0"
UPLINK = "uplink"
POD_INTERFACE = "eth0"
CLUSTER_DOMAIN = "cluster.local"
PODS = ipaddress.IPv4Network("10.235.0.0/16")
SERVICES = ipaddress.IPv4Network("10.236.0.0/16")
UPLINK_NETWORK = ipaddress.IPv4Network("10.237.0.0/30")


@dataclass(frozen=True)
class ClusterNetwork:
    """The addresses of one real cluster and the commands that make and remove its network."""

    prefix: str = "mnk"
    pods: ipaddress.IPv4Network = PODS
    services: ipaddress.IPv4Network = SERVICES
    uplink: ipaddress.IPv4Network = UPLINK_NETWORK

    @property
    def host(self) -> str:
        """The host namespace: the nodes' machine."""
        return f"{self.prefix}-host"

    @property
    def bridge_ip(self) -> str:
        return str(self.pods.broadcast_address - 1)

    @property
    def root_ip(self) -> str:
        """This machine's end of the uplink (where a test serves what pods may reach)."""
        return str(self.uplink.network_address + 1)

    @property
    def uplink_ip(self) -> str:
        return str(self.uplink.network_address + 2)

    @property
    def kubernetes_service_ip(self) -> str:
        return str(self.services.network_address + 1)

    @property
    def dns_ip(self) -> str:
        return str(self.services.network_address + 10)

    @property
    def root_link(self) -> str:
        return f"{self.prefix}-up"

    def in_host(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the host namespace."""
        return ["ip", "netns", "exec", self.host, *argv]

    def create(self) -> None:
        """Make the host namespace, its bridge and the uplink (after removing a previous one)."""
        require_root()
        self.destroy()
        ip("netns", "add", self.host)
        ip("-n", self.host, "link", "set", "lo", "up")
        ip(
            "link",
            "add",
            self.root_link,
            "type",
            "veth",
            "peer",
            "name",
            UPLINK,
            "netns",
            self.host,
        )
        ip("addr", "add", f"{self.root_ip}/{self.uplink.prefixlen}", "dev", self.root_link)
        ip("link", "set", self.root_link, "up")
        ip(
            "-n",
            self.host,
            "addr",
            "add",
            f"{self.uplink_ip}/{self.uplink.prefixlen}",
            "dev",
            UPLINK,
        )
        ip("-n", self.host, "link", "set", UPLINK, "up")
        ip("-n", self.host, "link", "add", BRIDGE, "type", "bridge")
        ip("-n", self.host, "addr", "add", f"{self.bridge_ip}/{self.pods.prefixlen}", "dev", BRIDGE)
        ip("-n", self.host, "link", "set", BRIDGE, "up")
        ip("-n", self.host, "route", "add", "default", "via", self.root_ip)
        for network in (self.pods, self.services):
            ip("route", "add", str(network), "via", self.uplink_ip)
        # The host routes between pods, the uplink and Service addresses; a Service's address is
        # rewritten to a pod's by kube-proxy's rules even between two pods on the bridge, which
        # the bridge passes to iptables only with bridge-nf-call-iptables (kubeadm's preflight
        # asks the same of a node).
        self._sysctl("net.ipv4.ip_forward", "1")
        self._sysctl("net.bridge.bridge-nf-call-iptables", "1")

    def destroy(self) -> None:
        """Remove every pod namespace, the host namespace and the uplink. Safe to repeat."""
        for namespace in namespaces_with_prefix(self.prefix):
            ip("netns", "delete", namespace, check=False)
            shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
        ip("link", "delete", self.root_link, check=False)  # its routes go with it

    def pod_namespace(self, uid: str) -> str:
        return f"{self.prefix}-p{uid.replace('-', '')[:16]}"

    def attach(self, uid: str, pod_ip: str, hostname: str, search: Sequence[str]) -> str:
        """Give pod ``uid`` its namespace, veth on the bridge, address, hosts and resolv.conf;
        return the namespace's name. ``search`` empty: the pod's dnsPolicy is Default, and it
        gets a resolver that fails at once (this machine's own cannot be reached from a pod)."""
        namespace = self.pod_namespace(uid)
        outside = "v" + hashlib.sha256(uid.encode()).hexdigest()[:12]
        ip("netns", "add", namespace)
        ip(
            "-n",
            self.host,
            "link",
            "add",
            outside,
            "type",
            "veth",
            "peer",
            "name",
            POD_INTERFACE,
            "netns",
            namespace,
        )
        ip("-n", self.host, "link", "set", outside, "master", BRIDGE, "up")
        # A pod reaching a Service whose endpoint is itself comes back through its own port.
        subprocess.run(
            self.in_host(["bridge", "link", "set", "dev", outside, "hairpin", "on"]),
            capture_output=True,
            check=False,
        )
        ip("-n", namespace, "addr", "add", f"{pod_ip}/{self.pods.prefixlen}", "dev", POD_INTERFACE)
        ip("-n", namespace, "link", "set", POD_INTERFACE, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        ip("-n", namespace, "route", "add", "default", "via", self.bridge_ip)
        etc = NETNS_ETC / namespace
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n{pod_ip} {hostname}\n")
        if search:
            resolv = f"search {' '.join(search)}\nnameserver {self.dns_ip}\noptions ndots:5\n"
        else:
            resolv = "nameserver 127.0.0.1\n"
        (etc / "resolv.conf").write_text(resolv)
        return namespace

    def detach(self, uid: str) -> None:
        namespace = self.pod_namespace(uid)
        ip("netns", "delete", namespace, check=False)
        shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)

    def search_domains(self, namespace: str) -> list[str]:
        return [f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]

    def _sysctl(self, key: str, value: str) -> None:
        path = Path("/proc/sys") / key.replace(".", "/")
        subprocess.run(
            self.in_host(["sh", "-c", f"echo {value} > {path}"]), check=True, capture_output=True
        )
