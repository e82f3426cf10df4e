"""Four cache peers, each in its own network namespace (a node), found through a DNS name, as in a
cluster with a headless Service; clients on the nodes download with the real `hf` command at once.

Needs root (network namespaces). Runs hold an exclusive lock, so two runs on one machine wait for
each other instead of colliding on the cache's prefix and subnet (``networks.CACHE_PEERS``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_llm.cache.peers import rendezvous
from multinode_llm_local.netns import Host, Network
from multinode_llm_testing.cache import (
    PEER_PORT,
    CacheProcess,
    hf_env,
    model_files,
    start_peers,
    wait_for_peers,
)
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.locks import file_lock
from multinode_llm_testing.networks import CACHE_PEERS
from multinode_llm_testing.waits import wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="peers run in network namespaces: needs root and iproute2",
)

PREFIX, SUBNET = CACHE_PEERS.at()
PEER_COUNT, CLIENT_COUNT = 4, 8


@pytest.fixture
def network() -> Iterator[Network]:
    with file_lock(CACHE_PEERS.lock, f"another run holds the {PREFIX} network", 600):
        net = Network(PREFIX, SUBNET)
        net.create()
        try:
            yield net
        finally:
            net.destroy()


@pytest.fixture
def hub_on_bridge(network: Network) -> Iterator[FakeHub]:
    hub = FakeHub(host=network.gateway).start()
    yield hub
    hub.stop()


@pytest.fixture
def nodes(
    network: Network, hub_on_bridge: FakeHub, tmp_path: Path
) -> Iterator[list[tuple[Host, CacheProcess]]]:
    hosts = [network.add_host(f"p{index}") for index in range(PEER_COUNT)]
    caches = start_peers(hosts, hub_on_bridge.url, tmp_path)
    try:
        wait_for_peers(caches)
        yield list(zip(hosts, caches, strict=True))
    finally:
        for cache in caches:
            cache.stop()
            print(f"--- {cache.log_path.name} ---\n{cache.log_tail(25)}")


def start_client(
    host: Host, cache: CacheProcess, repo_id: str, workdir: Path
) -> subprocess.Popen[bytes]:
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or "hf"
    workdir.mkdir(parents=True)
    return subprocess.Popen(
        host.command([hf, "download", repo_id, "--local-dir", str(workdir / "model")]),
        env=hf_env(cache.url, workdir / "home"),
        stdout=(workdir / "out.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def finish(
    clients: list[subprocess.Popen[bytes]],
    workdirs: list[Path],
    files: dict[str, bytes],
) -> None:
    deadline = time.monotonic() + 240
    for client, workdir in zip(clients, workdirs, strict=True):
        try:
            client.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
        log = (workdir / "out.log").read_text(errors="replace")[-2000:]
        assert client.returncode == 0, f"client in {workdir.name} failed:\n{log}"
        for path, content in files.items():
            assert (workdir / "model" / path).read_bytes() == content, (
                f"{workdir.name}: {path} differs"
            )


def test_four_peers_and_eight_clients_fetch_each_blob_from_upstream_once(
    nodes: list[tuple[Host, CacheProcess]], hub_on_bridge: FakeHub, tmp_path: Path
) -> None:
    files = model_files(seed=30, shard_size=16 << 20)
    hub_on_bridge.add(FakeRepo("org/fanout", files))
    workdirs = [tmp_path / f"client{index}" for index in range(CLIENT_COUNT)]
    clients = [
        start_client(*nodes[index % PEER_COUNT], "org/fanout", workdir)
        for index, workdir in enumerate(workdirs)
    ]
    finish(clients, workdirs, files)

    model_size = sum(map(len, files.values()))
    upstream_bytes = hub_on_bridge.blob_bytes.total()
    ratio = upstream_bytes / model_size
    print(f"four peers, eight clients: upstream bytes / model size = {ratio:.3f}")
    assert dict(hub_on_bridge.blob_gets) == dict.fromkeys(files, 1), (
        "a blob was fetched upstream twice"
    )
    assert upstream_bytes == model_size
    peer_bytes = sum(cache.metrics()["peer_bytes_total"] for _, cache in nodes)
    assert peer_bytes > 0, "no node fetched from a peer: every node went upstream"


def test_a_peer_killed_mid_transfer_costs_a_retry_not_a_download(
    nodes: list[tuple[Host, CacheProcess]], hub_on_bridge: FakeHub, tmp_path: Path
) -> None:
    files = model_files(seed=31, shard_size=24 << 20)
    big = "model-00001-of-00002.safetensors"
    hub_on_bridge.add(FakeRepo("org/survive", files))
    hub_on_bridge.bytes_per_second = 6 << 20  # about 4 s for the big blob: time to kill its owner
    key = f"sha256:{hashlib.sha256(files[big]).hexdigest()}"
    owner = rendezvous(key, [f"{host.ip}:{PEER_PORT}" for host, _ in nodes])[0]
    victim = next(cache for host, cache in nodes if f"{host.ip}:{PEER_PORT}" == owner)
    survivors = [node for node in nodes if node[1] is not victim]

    workdirs = [tmp_path / f"client{index}" for index in range(CLIENT_COUNT)]
    clients = [
        start_client(*survivors[index % len(survivors)], "org/survive", workdir)
        for index, workdir in enumerate(workdirs)
    ]
    wait_until(
        lambda: hub_on_bridge.blob_bytes[big] >= 6 << 20,
        120,
        "the owner to be mid-transfer",
    )
    victim.kill()
    finish(clients, workdirs, files)

    size = len(files[big])
    ratio = hub_on_bridge.blob_bytes[big] / size
    print(f"owner killed mid-transfer: upstream bytes of the big blob / its size = {ratio:.3f}")
    assert hub_on_bridge.blob_bytes[big] < 2 * size, "the heir started over instead of resuming"
    assert sum(cache.metrics()["peer_retries_total"] for _, cache in survivors) >= 1


def test_a_node_streams_its_owners_fill_while_the_owner_still_fills_it(
    nodes: list[tuple[Host, CacheProcess]], hub_on_bridge: FakeHub, tmp_path: Path
) -> None:
    """`hf download` on a node that does not own the blob: that node's bytes come from the owner
    while the owner's own fill is still running, not after it."""
    files = model_files(seed=32, shard_size=24 << 20)
    big = "model-00001-of-00002.safetensors"
    hub_on_bridge.add(FakeRepo("org/stream", files))
    hub_on_bridge.bytes_per_second = 6 << 20  # about 4 s for the big blob
    digest = hashlib.sha256(files[big]).hexdigest()
    addresses = [f"{host.ip}:{PEER_PORT}" for host, _ in nodes]
    owner_address = rendezvous(f"sha256:{digest}", addresses)[0]
    owner = next(cache for host, cache in nodes if f"{host.ip}:{PEER_PORT}" == owner_address)
    host, cache = next(node for node in nodes if node[1] is not owner)

    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or "hf"
    workdir = tmp_path / "client"
    workdir.mkdir()
    command = [hf, "download", "org/stream", big, "--local-dir", str(workdir / "model")]
    client = subprocess.Popen(
        host.command(command),
        env=hf_env(cache.url, workdir / "home"),
        stdout=(workdir / "out.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: cache.metrics()["peer_bytes_total"] >= 1 << 20, 120, "bytes from the owner"
        )
        # Upstream has not even sent the whole blob yet: the node's bytes came before the fill
        # could end.
        assert hub_on_bridge.blob_bytes[big] < len(files[big]), (
            "the node got its first bytes only after the owner had the whole blob"
        )
        client.wait(120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    log = (workdir / "out.log").read_text(errors="replace")[-2000:]
    assert client.returncode == 0, log
    assert (workdir / "model" / big).read_bytes() == files[big]
    assert hub_on_bridge.blob_gets[big] == 1
