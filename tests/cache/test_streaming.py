"""A peer's request for a blob still being filled is answered as the bytes land (a peer verifies
every byte itself), ranges included, and cut off with an error, never ended short, when the fill
fails or starts over. A client's request still waits for the verified blob (test_hostile_upstream
holds that line for every reader that is not a peer)."""

from __future__ import annotations

import hashlib
import http.client
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from multinode_llm.cache.routes import PEER_HEADER
from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.waits import wait_until

SHARD = "model-00001-of-00002.safetensors"
AS_PEER = {PEER_HEADER: "10.0.0.9:8090"}


def _open(cache: CacheProcess, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    host, port = cache.url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", path, headers=headers)
    return connection.getresponse()


def _stored(cache: CacheProcess, content: bytes) -> Path:
    return cache.store / "blobs" / "sha256" / hashlib.sha256(content).hexdigest()


def _settled(cache: CacheProcess) -> None:
    wait_until(lambda: cache.metrics()["fills_in_flight"] == 0, 30, "the fills to end")
    assert cache.leftovers() == []


def test_a_peer_gets_bytes_of_a_fill_before_it_finished(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    content = model_files(seed=120, shard_size=8 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/stream", {SHARD: content}))
    fake_hub.bytes_per_second = 2 << 20  # about 4 s for the fill
    cache = start_cache()
    url = f"/org/stream/resolve/{repo.commit}/{SHARD}"
    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(raw_request, cache.url, "GET", url)  # starts the fill, waits for it
        wait_until(lambda: cache.metrics()["fills_in_flight"] == 1, 30, "the fill to start")
        response = _open(cache, url, AS_PEER)
        assert response.status == 200
        first = response.read(1 << 20)
        # The owner publishes a blob only once verified: absent now, so these bytes came first.
        assert not _stored(cache, content).exists(), "the fill ended before the peer got a byte"
        assert cache.metrics()["fills_in_flight"] == 1
        rest = response.read()
        assert first + rest == content
        status, _, body = client.result()
    assert (status, body == content) == (200, True)
    assert fake_hub.blob_gets[SHARD] == 1, "the peer's request started a second fill"
    _settled(cache)


def test_ranges_over_a_filling_blob_are_the_blobs_bytes(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    content = model_files(seed=121, shard_size=6 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/ranges", {SHARD: content}))
    fake_hub.bytes_per_second = 3 << 20
    cache = start_cache()
    url = f"/org/ranges/resolve/{repo.commit}/{SHARD}"
    size = len(content)
    ranges = {  # header -> (first byte, last byte)
        "bytes=0-0": (0, 0),
        f"bytes={size // 2}-": (size // 2, size - 1),
        f"bytes={size // 4}-{size // 3}": (size // 4, size // 3),
        "bytes=-1000": (size - 1000, size - 1),
        f"bytes={size - 10}-{size * 2}": (size - 10, size - 1),  # clamped, as for hf_transfer
    }

    def fetch(header: str) -> tuple[str, int, str | None, bytes]:
        status, headers, body = raw_request(cache.url, "GET", url, {**AS_PEER, "Range": header})
        return header, status, headers.get("Content-Range"), body

    with ThreadPoolExecutor(len(ranges)) as pool:
        results = list(pool.map(fetch, ranges))
    for header, status, content_range, body in results:
        first, last = ranges[header]
        assert status == 206, header
        assert content_range == f"bytes {first}-{last}/{size}", header
        assert body == content[first : last + 1], header
    assert fake_hub.blob_gets[SHARD] == 1
    _settled(cache)


@pytest.mark.parametrize("fault", ["cut", "corrupt"])
def test_a_fill_that_fails_cuts_its_streaming_reader_off_with_an_error(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], fault: str
) -> None:
    """``cut``: every upstream attempt breaks off, so the fill fails mid-way; ``corrupt``: every
    attempt hashes wrong, so the fill starts over and then fails. The peer reading along never
    gets a body it could take for whole: an error status, or a connection cut short."""
    content = model_files(seed=122, shard_size=4 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/broken", {SHARD: content}))
    fake_hub.fault(SHARD, fault)
    fake_hub.bytes_per_second = 8 << 20
    cache = start_cache()
    response = _open(cache, f"/org/broken/resolve/{repo.commit}/{SHARD}", AS_PEER)
    if response.status != 200:
        assert response.status == 502
        assert response.headers["X-Error-Code"] in ("FillFailed", "CorruptBlob")
    else:
        assert response.headers["Content-Length"] == str(len(content))
        with pytest.raises(http.client.IncompleteRead) as short:
            response.read()
        assert len(short.value.partial) < len(content)
        if fault == "cut":  # an honest upstream that broke off: what came was its bytes
            assert short.value.partial == content[: len(short.value.partial)]
    _settled(cache)
    assert cache.metrics()["store_blobs"] == 0
