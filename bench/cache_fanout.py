"""Cold fan-out: four nodes fetch one model at once through their cache peers, or straight upstream.

Four nodes are four network namespaces, each running `multinode-llm cache serve` as one of four
peers found through one DNS name (what a headless Service gives). The upstream is the FAKE Hub
(tests/cache/fake_hub.py) on the bridge, throttled to a fixed bandwidth shared by all its
connections: one uplink. On every node the real `hf download` fetches the model at the same moment,
either through its node's cache (``HF_ENDPOINT`` = the peer) or directly from the upstream (the
baseline). Figures: upstream bytes / model size, and the time until every node has the whole model
against the upstream-bound limit (one copy of the model over the link: model size / link rate) and
against the direct downloads. Each repetition uses a new repository (different bytes), so the
caches are cold for it; the order of the two ways alternates between repetitions. After each cold
fetch through the peers the same clients fetch again, warm: what the clients themselves take (their
start, the metadata, copying the model from their node), the part of a cold fetch no uplink sets.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from multinode_llm_local.netns import Host
from multinode_llm_testing.cache import CacheProcess, hf_env, start_peers, wait_for_peers
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.networks import BENCH_CACHE

from bench.figures import Figure, Goal, Load, load_average
from bench.sandbox import sandbox

NODES = 4
CLIENT_TIMEOUT_S = 600.0
UPSTREAM_GOAL = Goal("value", "<=", 1.0, "upstream bytes = 1.0 x model size with four peers")
LIMIT_GOAL = Goal("ratio", "<=", 1.25, "cold fan-out to 4 nodes <= 1.25 x model size / uplink rate")


@dataclass(frozen=True)
class Options:
    # The link is slow next to what two cores can move: here four "nodes" share the machine's two
    # cores, so receiving, verifying and storing every copy takes about 20 s for 256 MiB even
    # with no throttle (a real node has its own CPU); at 8 MiB/s the link is what a run measures.
    size_mib: int = 128  # the model's two weight shards together
    link_mib_s: float = 8.0  # the upstream's bandwidth, shared by all its connections
    repetitions: int = 2


@dataclass(frozen=True)
class Fetch:
    seconds: float  # until the last node had every file
    upstream_bytes: int
    warm_seconds: float = 0.0  # the same fetch again from the filled caches (peers only)


def measure(options: Options, log: Callable[[str], None]) -> list[Figure]:
    work = Path(tempfile.mkdtemp(prefix="mnb-fanout-"))
    try:
        with sandbox(BENCH_CACHE) as box:
            hub = FakeHub(host=box.network.gateway).start()
            try:
                hub.link_bytes_per_second = options.link_mib_s * (1 << 20)
                hosts = [box.network.add_host(f"n{index}") for index in range(NODES)]
                caches = start_peers(hosts, hub.url, work)
                try:
                    wait_for_peers(caches)
                    with load_average() as load:
                        peers, direct, size = _repeat(options, hub, hosts, caches, work, log)
                finally:
                    for cache in caches:
                        cache.stop()
            finally:
                hub.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _figures(options, peers, direct, size, load)


def _repeat(
    options: Options,
    hub: FakeHub,
    hosts: list[Host],
    caches: list[CacheProcess],
    work: Path,
    log: Callable[[str], None],
) -> tuple[list[Fetch], list[Fetch], int]:
    peers: list[Fetch] = []
    direct: list[Fetch] = []
    size = 0
    for repetition in range(options.repetitions):
        repo = hub.add(FakeRepo(f"org/fanout-{repetition}", _files(options.size_mib, repetition)))
        _hash_ahead(repo)
        size = repo.size
        ways = [("peers", [cache.url for cache in caches]), ("direct", [hub.url] * NODES)]
        for way, endpoints in ways if repetition % 2 == 0 else ways[::-1]:
            fetch = _fetch_everywhere(hub, hosts, endpoints, repo, work / f"{way}-{repetition}")
            if way == "peers":
                warm = _fetch_everywhere(hub, hosts, endpoints, repo, work / f"warm-{repetition}")
                fetch = Fetch(fetch.seconds, fetch.upstream_bytes, warm.seconds)
            (peers if way == "peers" else direct).append(fetch)
            log(
                f"cache fan-out {repetition + 1}/{options.repetitions} {way}: "
                f"{fetch.seconds:.1f} s, upstream {fetch.upstream_bytes / size:.2f} x model size"
                + (f"; warm again {fetch.warm_seconds:.1f} s" if way == "peers" else "")
            )
    return peers, direct, size


def _hash_ahead(repo: FakeRepo) -> None:
    """Let the fake Hub hash the new files before the clock runs (it keeps the digests)."""
    for path in repo.files:
        repo.sha256(path)
        repo.git_oid(path)
        repo.xet_hash(path)


def _files(size_mib: int, seed: int) -> dict[str, bytes]:
    """A model repository: config and tokenizer (git files) and two weight shards (LFS)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible bytes, not secrets
    shard = (size_mib << 20) // 2
    return {
        "config.json": b'{"model_type": "llama", "seed": %d}' % seed,
        "tokenizer.json": rng.randbytes(4000).hex().encode(),
        "model-00001-of-00002.safetensors": rng.randbytes(shard),
        "model-00002-of-00002.safetensors": rng.randbytes(shard),
    }


def _fetch_everywhere(
    hub: FakeHub, hosts: list[Host], endpoints: list[str], repo: FakeRepo, work: Path
) -> Fetch:
    """`hf download` on every node at once, each through ``endpoints[i]``: wall time and bytes."""
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or "hf"
    hub.reset_counts()
    started = time.monotonic()
    clients = []
    for index, (host, endpoint) in enumerate(zip(hosts, endpoints, strict=True)):
        directory = work / f"node{index}"
        directory.mkdir(parents=True)
        argv = [hf, "download", repo.repo_id, "--local-dir", str(directory / "model")]
        with (directory / "out.log").open("wb") as output:
            clients.append(
                subprocess.Popen(
                    host.command(argv),
                    # Both ways download plain HTTP bodies: the fake Hub has no Xet storage.
                    env={**hf_env(endpoint, directory / "home"), "HF_HUB_DISABLE_XET": "1"},
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        for client in clients:
            client.wait(max(1.0, started + CLIENT_TIMEOUT_S - time.monotonic()))
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()
    seconds = time.monotonic() - started
    for index, client in enumerate(clients):
        _check_copy(client.returncode, work / f"node{index}", repo)
    return Fetch(seconds, hub.blob_bytes.total())


def _check_copy(code: int | None, directory: Path, repo: FakeRepo) -> None:
    if code != 0:
        log = (directory / "out.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"hf download in {directory} exited with {code}:\n{log}")
    for path, content in repo.files.items():
        got = (directory / "model" / path).read_bytes()
        if hashlib.sha256(got).digest() != hashlib.sha256(content).digest():
            raise RuntimeError(f"{directory}: {path} differs from the upstream's")


def _figures(
    options: Options, peers: list[Fetch], direct: list[Fetch], size: int, load: Load
) -> list[Figure]:
    config = {
        "nodes": NODES,
        "model_bytes": size,
        "files": "config.json, tokenizer.json, two safetensors shards (LFS, via the fake CDN)",
        "upstream": f"FAKE Hub, {options.link_mib_s:g} MiB/s shared by all its connections",
        "client": "`hf download` (huggingface_hub) on every node at once",
        "repetitions": options.repetitions,
    }
    alone = size / (options.link_mib_s * (1 << 20))
    time_ratios = [p.seconds / d.seconds for p, d in zip(peers, direct, strict=True)]
    limit_ratios = [p.seconds / alone for p in peers]
    warm = statistics.median(p.warm_seconds for p in peers)
    return [
        Figure(
            benchmark="cache",
            name="cold fan-out to 4 nodes: time until every node has the model, vs the uplink",
            unit="s",
            value=statistics.median(p.seconds for p in peers),
            baseline=alone,
            baseline_name="upstream-bound limit (model size / uplink rate)",
            config=config,
            load=load,
            goal=LIMIT_GOAL,
            paired_ratio=statistics.median(limit_ratios),
            spread=(min(limit_ratios), max(limit_ratios)),
            runs=[{"peers": p.seconds, "warm": p.warm_seconds, "limit": alone} for p in peers],
            note=(
                f"the same clients fetching again from the filled caches take {warm:.1f} s "
                "(their start, the metadata, the copy from their node): what no uplink sets"
            ),
        ),
        Figure(
            benchmark="cache",
            name="cold fan-out to 4 nodes: upstream bytes / model size",
            unit="x model",
            value=max(p.upstream_bytes for p in peers) / size,
            baseline=max(d.upstream_bytes for d in direct) / size,
            baseline_name="4 nodes downloading directly",
            config=config,
            load=load,
            goal=UPSTREAM_GOAL,
            runs=[
                {"peers": p.upstream_bytes / size, "direct": d.upstream_bytes / size}
                for p, d in zip(peers, direct, strict=True)
            ],
            note="the worst repetition",
        ),
        Figure(
            benchmark="cache",
            name="cold fan-out to 4 nodes: time until every node has the model",
            unit="s",
            value=statistics.median(p.seconds for p in peers),
            baseline=statistics.median(d.seconds for d in direct),
            baseline_name="4 nodes downloading directly",
            config=config,
            load=load,
            paired_ratio=statistics.median(time_ratios),
            spread=(min(time_ratios), max(time_ratios)),
            runs=[
                {"peers": p.seconds, "direct": d.seconds}
                for p, d in zip(peers, direct, strict=True)
            ],
            note=f"one copy of the model over the link alone takes {alone:.1f} s",
        ),
    ]
