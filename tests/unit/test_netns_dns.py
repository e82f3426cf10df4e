"""A namespace's lookups outside its /etc/hosts fail at once instead of timing out.

Needs root (it creates a network namespace); skips otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from multinode_llm_local.netns import NETNS_ETC, Network
from multinode_llm_testing.locks import file_lock
from multinode_llm_testing.networks import NETNS_DNS_UNIT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="creates a network namespace: needs root and iproute2",
)

PREFIX, SUBNET = NETNS_DNS_UNIT.at()
REVERSE_LOOKUP = (
    "import socket, time\n"
    "began = time.monotonic()\n"
    "try:\n"
    f"    socket.getnameinfo(('{SUBNET[1]}', 80), 0)\n"
    "except OSError:\n"
    "    pass\n"
    "print(time.monotonic() - began)\n"
)


def test_hosts_names_resolve_and_other_lookups_fail_fast() -> None:
    with file_lock(NETNS_DNS_UNIT.lock, "another run holds this test's namespace", 120):
        _check_lookups()
    assert not (NETNS_ETC / f"{PREFIX}-a").exists()


def _check_lookups() -> None:
    network = Network(PREFIX, SUBNET)
    network.create()
    try:
        host = network.add_host("a")
        network.set_hosts(host, {"head.default.svc.cluster.local": host.ip})
        assert (NETNS_ETC / host.namespace / "resolv.conf").read_text() == "nameserver 127.0.0.1\n"
        resolved = subprocess.run(
            host.command(["getent", "hosts", "head.default.svc.cluster.local"]),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert resolved.stdout.split()[0] == host.ip
        lookup = subprocess.run(
            host.command([sys.executable, "-c", REVERSE_LOOKUP]),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert float(lookup.stdout) < 2.0, "a reverse lookup waited for an unreachable nameserver"
    finally:
        network.destroy()
