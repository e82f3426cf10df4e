"""Private networks of network namespaces: one namespace per pod, joined by veth pairs on a bridge.

The local cluster runs each pod in its own namespace, with its own address and `/etc/hosts`
(``ip netns exec`` bind-mounts ``/etc/netns/<namespace>/hosts`` over it), so a pod sees the service
DNS names KServe would give it. The bridge carries an address too, so the host reaches every pod.

Every name a network creates starts with its ``prefix``: ``destroy()`` removes exactly those, and a
later run with the same prefix removes what a crashed run left behind. Interface names are limited
to 15 characters by the kernel, so prefixes are short (at most 8 characters).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from multinode_llm.errors import UserError

NETNS_ETC = Path("/etc/netns")
POD_INTERFACE = "eth0"  # what a pod sees, as in Kubernetes
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,7}$")


@dataclass(frozen=True)
class Host:
    """One network namespace on the bridge: what a pod is to the network."""

    namespace: str
    ip: str
    interface: str = POD_INTERFACE

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` inside this namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


class Network:
    """A bridge in the root namespace and the namespaces attached to it, on one private /24.

    >>> net = Network("mnl", ipaddress.ip_network("10.231.0.0/24"))
    >>> net.create(); head = net.add_host("head"); net.set_hosts(head, {"svc": head.ip})
    >>> subprocess.run(head.command(["ip", "addr"]))
    >>> net.destroy()
    """

    def __init__(self, prefix: str, subnet: ipaddress.IPv4Network) -> None:
        if not _PREFIX.match(prefix):
            raise UserError(
                f"network prefix {prefix!r} is not 1-8 lowercase letters, digits or '-': "
                "choose a short prefix such as 'mnl'"
            )
        if subnet.prefixlen != 24:
            raise UserError(f"subnet {subnet} is not a /24: pass one such as 10.231.0.0/24")
        self.prefix = prefix
        self.subnet = subnet
        self.bridge = f"{prefix}-br"
        self.gateway = str(subnet.network_address + 1)
        self.hosts: dict[str, Host] = {}

    def create(self) -> None:
        """Create the bridge (after removing anything a previous run with this prefix left)."""
        require_root()
        self.destroy()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        """Create namespace ``<prefix>-<name>`` with the next free address on the subnet."""
        index = len(self.hosts) + 2  # .1 is the bridge
        if index > 254:
            raise UserError(f"network {self.prefix} is full: at most 253 hosts per /24")
        namespace = f"{self.prefix}-{name}"
        host = Host(namespace=namespace, ip=str(self.subnet.network_address + index))
        outside = f"{self.prefix}-v{index}"
        ip("netns", "add", namespace)
        ip(
            "link",
            "add",
            outside,
            "type",
            "veth",
            "peer",
            "name",
            host.interface,
            "netns",
            namespace,
        )
        ip("link", "set", outside, "master", self.bridge, "up")
        ip("-n", namespace, "addr", "add", f"{host.ip}/24", "dev", host.interface)
        ip("-n", namespace, "link", "set", host.interface, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        ip("-n", namespace, "route", "add", "default", "via", self.gateway)
        self.hosts[name] = host
        return host

    def set_hosts(self, host: Host, names: Mapping[str, str | Sequence[str]]) -> None:
        """Write the namespace's ``/etc/hosts``: localhost and ``names`` (name -> IP, or the IPs
        of every pod behind a headless Service: one line each, as DNS would return them all).

        Also its ``/etc/resolv.conf``: a nameserver on the namespace's own loopback, where none
        listens, so that any other lookup fails at once. The host's nameserver is not reachable
        from a namespace: each lookup would wait out the resolver's timeouts (10 s), and
        PyTorch's c10d looks up the name of every peer's address while vLLM starts a group.
        """
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for name, ips in sorted(names.items()):
            lines += [f"{ip} {name}" for ip in ([ips] if isinstance(ips, str) else ips)]
        directory = NETNS_ETC / host.namespace
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts").write_text("\n".join(lines) + "\n")
        (directory / "resolv.conf").write_text("nameserver 127.0.0.1\n")

    def destroy(self) -> None:
        """Remove every namespace, veth, hosts file and bridge this prefix names. Safe to repeat."""
        for namespace in namespaces_with_prefix(self.prefix):
            ip("netns", "delete", namespace, check=False)
            shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
        # Deleting a namespace takes the veth pair with it only once nothing holds the namespace
        # (a process still exiting does): delete the host-side ends by name, too.
        for link in _links_with_prefix(f"{self.prefix}-v"):
            ip("link", "delete", link, check=False)
        ip("link", "delete", self.bridge, check=False)
        self.hosts.clear()


def namespaces_with_prefix(prefix: str) -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = [line.split()[0] for line in listing.stdout.splitlines() if line.strip()]
    return [name for name in names if name.startswith(f"{prefix}-")]


def _links_with_prefix(prefix: str) -> list[str]:
    listing = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=False
    )
    # "7: llm-v2@if6: <BROADCAST,...": the name, less the peer's "@ifN"
    names = [line.split(":", 2)[1].strip().split("@", 1)[0] for line in listing.stdout.splitlines()]
    return [name for name in names if name.startswith(prefix)]


def require_root() -> None:
    if os.geteuid() != 0:
        raise UserError(
            "network namespaces need root: run this command as root (for example with sudo)"
        )


def ip(*args: str, check: bool = True) -> None:
    """Run `ip ARGS`; a failure (with check) is a UserError quoting the command and its error."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise UserError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
