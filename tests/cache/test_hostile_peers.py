"""Hostile peers, on loopback: a peer is trusted no more than upstream. A peer that sends a wrong
byte or extra bytes, hangs, redirects or dies is dropped for the request (which goes on from
upstream, so the client still gets the right file) and left out for a while. Callers' tokens go to
a peer only where the peer must decide itself (files not known to be public), and never further."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from multinode_llm.cache.peers import rendezvous
from multinode_llm_testing.cache import CacheProcess, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

PEER_HEADER = "X-Multinode-Llm-Peer"
TIMEOUT = 2


@pytest.fixture
def fake_peer() -> Iterator[FakeHub]:
    """A FAKE peer cache: the fake Hub answering file GETs itself, and ``/live``."""
    peer = FakeHub()
    peer.direct = True
    peer.start()
    yield peer
    peer.stop()


def owned_by(peer: str, me: str, seed: int, count: int = 1) -> dict[str, bytes]:
    """Files whose blobs ``peer`` owns (ranks first for) among ``peer`` and ``me``."""
    files: dict[str, bytes] = {}
    rng = random.Random(seed)
    while len(files) < count:
        content = rng.randbytes(1 << 20)
        if rendezvous(f"sha256:{hashlib.sha256(content).hexdigest()}", [peer, me])[0] == peer:
            files[f"w{len(files)}.safetensors"] = content
    return files


@pytest.fixture
def beside(
    fake_hub: FakeHub, fake_peer: FakeHub, start_cache: Callable[..., CacheProcess]
) -> Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]]:
    """A cache whose peer is ``fake_peer``, and a repo (on both) whose blobs the peer owns."""

    def start(
        *args: str, seed: int = 0, count: int = 2, **repo_kwargs: Any
    ) -> tuple[CacheProcess, dict[str, bytes], FakeRepo]:
        port = free_port()
        peer = f"127.0.0.1:{fake_peer.port}"
        files = owned_by(peer, f"127.0.0.1:{port}", seed, count)
        repo = fake_hub.add(FakeRepo("org/shared", files, **repo_kwargs))
        fake_peer.add(FakeRepo("org/shared", files, **repo_kwargs))
        cache = start_cache("--peer", peer, "--advertise-address", "127.0.0.1", *args, port=port)
        wait_until(lambda: cache.metrics()["peers_live"] == 2, 30, "the cache to see its peer")
        return cache, files, repo

    return start


@pytest.mark.parametrize("fault", ["corrupt", "long"])
def test_a_lying_peer_falls_back_to_upstream_in_the_same_request_and_is_left_out(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
    fault: str,
) -> None:
    cache, files, repo = beside(seed=1)
    first, second = sorted(files)
    fake_peer.fault(first, fault)
    fake_peer.fault(second, fault)
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{first}")
    assert (status, body == files[first]) == (200, True), "the lie reached the client"
    assert fake_peer.blob_gets[first] == 1
    assert fake_hub.blob_gets[first] == 1, "the fill did not go on from upstream"
    assert cache.metrics()["peers_live"] == 1, "the lying peer is still asked"
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{second}")
    assert (status, body == files[second]) == (200, True)
    assert fake_peer.blob_gets[second] == 0, "a peer that lied was asked again at once"
    wait_until(lambda: cache.metrics()["fills_in_flight"] == 0, 30, "the fills to end")
    assert cache.leftovers() == []


@pytest.mark.parametrize("fault", ["cut", "short"])
def test_a_peer_that_stops_mid_body_costs_a_resume_from_upstream(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
    fault: str,
) -> None:
    cache, files, repo = beside(seed=2, count=1)
    [name] = files
    fake_peer.fault(name, fault)
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{name}")
    assert (status, body == files[name]) == (200, True)
    assert 0 < fake_hub.blob_bytes[name] < len(files[name]), "upstream should send only the rest"


def test_a_hanging_peer_is_dropped_within_the_timeout(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
) -> None:
    cache, files, repo = beside("--upstream-timeout", str(TIMEOUT), seed=3, count=1)
    [name] = files
    fake_peer.fault(name, "hang")
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{name}")
    assert (status, body == files[name]) == (200, True)


def test_a_dead_peer_costs_nothing_but_a_retry(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
) -> None:
    cache, files, repo = beside(seed=4, count=1)
    [name] = files
    fake_peer.stop()
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{name}")
    assert (status, body == files[name]) == (200, True)


def test_a_peer_that_redirects_is_not_followed(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
) -> None:
    cache, files, repo = beside(seed=5, count=1, private=True, readers={"alice"})
    [name] = files
    fake_peer.direct = False  # it answers as the Hub does: a 302 to its CDN
    auth = {"Authorization": "Bearer alice"}
    status, _, body = raw_request(
        cache.url, "GET", f"/org/shared/resolve/{repo.commit}/{name}", auth
    )
    assert (status, body == files[name]) == (200, True)
    assert fake_peer.requests["cdn"] == 0, "the cache followed a peer's redirect"


def test_a_callers_token_goes_to_the_owner_and_no_further(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
) -> None:
    """The owner decides for itself, so it gets the caller's token (see DEVELOPERS.md); a request
    that came from a peer is never passed to a third one."""
    cache, files, _ = beside(seed=6, count=2, gated=True, readers={"alice"})
    first, second = sorted(files)
    auth = {"Authorization": "Bearer alice"}
    status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/main/{first}", auth)
    assert (status, body == files[first]) == (200, True)
    asked = [seen for seen in fake_peer.requests_seen if seen[1] != "/live"]
    assert [(method, token) for method, _, token, _ in asked] == [("GET", "Bearer alice")]
    fake_peer.requests_seen.clear()
    status, _, body = raw_request(
        cache.url,
        "GET",
        f"/org/shared/resolve/main/{second}",
        {**auth, PEER_HEADER: "10.1.1.1:8090"},
    )
    assert (status, body == files[second]) == (200, True)
    assert [seen for seen in fake_peer.requests_seen if seen[1] != "/live"] == []


def test_a_peer_is_never_asked_for_a_gated_file_the_caller_may_not_read(
    fake_hub: FakeHub,
    fake_peer: FakeHub,
    beside: Callable[..., tuple[CacheProcess, dict[str, bytes], FakeRepo]],
) -> None:
    cache, files, _ = beside(seed=7, count=1, gated=True, readers={"alice"})
    [name] = files
    for headers in ({}, {"Authorization": "Bearer mallory"}):
        status, _, body = raw_request(cache.url, "GET", f"/org/shared/resolve/main/{name}", headers)
        assert status in (401, 403)
        assert files[name][:16] not in body
    assert fake_peer.requests_seen == [
        (m, p, a, c) for m, p, a, c in fake_peer.requests_seen if p == "/live"
    ]
    status, _, body = raw_request(
        cache.url, "GET", f"/org/shared/resolve/main/{name}", {"Authorization": "Bearer alice"}
    )
    assert (status, body == files[name]) == (200, True)
