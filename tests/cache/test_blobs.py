"""Blob bytes: Range semantics, shared fills, verification, eviction, a Hub that is down."""

from __future__ import annotations

import asyncio
import http.client
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from huggingface_hub import constants, hf_hub_download
from multinode_llm.cache import fills, responses, routes
from multinode_llm.cache.ranges import ByteRange
from multinode_llm.cache.server import Settings, running
from multinode_llm.cache.store import BlobKey
from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

SHARD = "model-00001-of-00002.safetensors"


def test_range_requests_answer_206_clamped_and_416_past_the_end(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=20)
    repo = fake_hub.add(FakeRepo("org/ranges", files))
    cache = start_cache()
    content, size = files[SHARD], len(files[SHARD])
    url = f"/org/ranges/resolve/{repo.commit}/{SHARD}"

    status, headers, _ = raw_request(cache.url, "HEAD", url)
    assert (status, headers["Content-Length"], headers["Accept-Ranges"]) == (
        200,
        str(size),
        "bytes",
    )
    for stored in (
        False,
        True,
    ):  # the first pass fills the blob, the second serves it stored
        cases = {
            "bytes=0-0": (0, 0),
            "bytes=10-": (10, size - 1),
            "bytes=5-9": (5, 9),
            f"bytes=0-{size}": (
                0,
                size - 1,
            ),  # hf_transfer asks one past the end: clamp
            "bytes=-100": (size - 100, size - 1),
        }
        for header, (start, end) in cases.items():
            status, headers, body = raw_request(
                cache.url, "GET", url, {"Range": header, "Accept-Encoding": "gzip"}
            )
            assert status == 206, f"{header} (stored={stored})"
            assert headers["Content-Range"] == f"bytes {start}-{end}/{size}"
            assert "Content-Encoding" not in headers, "a 206 must never be compressed"
            assert body == content[start : end + 1], header
            assert headers["X-Repo-Commit"] == repo.commit
            assert headers["ETag"] == f'"{repo.etag(SHARD)}"', "the Hub's entity tag, as HEAD's"
        status, headers, body = raw_request(cache.url, "GET", url, {"Range": f"bytes={size}-"})
        assert (status, headers["Content-Range"]) == (416, f"bytes */{size}")
        status, headers, body = raw_request(cache.url, "GET", url)
        assert (status, body) == (200, content)
        assert headers["ETag"] == f'"{repo.etag(SHARD)}"'
        # Preconditions are not judged against a tag of the cache's own (a 412 here would be).
        status, _, body = raw_request(cache.url, "GET", url, {"If-Match": headers["ETag"]})
        assert (status, body) == (200, content)
    assert fake_hub.blob_gets[SHARD] == 1


def test_readers_share_one_fill_while_it_is_in_flight(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    content = model_files(seed=21, shard_size=6 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/slow", {SHARD: content}))
    fake_hub.bytes_per_second = 4 << 20  # 1.5 s for the whole blob
    cache = start_cache()
    url = f"/org/slow/resolve/{repo.commit}/{SHARD}"
    ranges = [None, None, "bytes=5000000-", "bytes=1048576-2097151", "bytes=0-0", None]

    def fetch(header: str | None) -> tuple[int, bytes]:
        status, _, body = raw_request(cache.url, "GET", url, {"Range": header} if header else {})
        return status, body

    with ThreadPoolExecutor(len(ranges)) as pool:
        results = list(pool.map(fetch, ranges))
    assert results[0] == (200, content)
    assert results[2] == (206, content[5000000:])
    assert results[3] == (206, content[1048576:2097152])
    assert results[4] == (206, content[:1])
    assert fake_hub.blob_gets[SHARD] == 1, "concurrent misses must coalesce into one upstream fetch"
    metrics = cache.metrics()
    assert metrics["misses_total"] == 1
    assert metrics["coalesced_total"] + metrics["hits_total"] == len(ranges) - 1


def test_a_fill_survives_the_client_that_started_it(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    content = model_files(seed=22, shard_size=4 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/left", {SHARD: content}))
    fake_hub.bytes_per_second = 4 << 20
    cache = start_cache()
    host, port = cache.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(
            f"GET /org/left/resolve/{repo.commit}/{SHARD} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        wait_until(lambda: fake_hub.blob_bytes[SHARD] > 0, 20, "the fill to start")
    # ... and hang up while the blob is still on its way in.
    assert fake_hub.blob_bytes[SHARD] < len(content)
    wait_until(
        lambda: cache.metrics()["store_blobs"] == 1,
        20,
        "the abandoned fill to complete",
    )
    fake_hub.reset_counts()
    status, _, body = raw_request(cache.url, "GET", f"/org/left/resolve/{repo.commit}/{SHARD}")
    assert (status, body) == (200, content)
    assert fake_hub.blob_gets.total() == 0


@pytest.mark.parametrize("path", [SHARD, "config.json"])  # a sha256 (LFS) and a git sha1 file
def test_corrupted_upstream_bytes_are_never_served(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path, path: str
) -> None:
    files = model_files(seed=23, shard_size=3 << 20)
    repo = fake_hub.add(FakeRepo("org/corrupt", files))
    fake_hub.corrupt.add(path)
    cache = start_cache()
    url = f"/org/corrupt/resolve/{repo.commit}/{path}"

    with pytest.raises(Exception):  # noqa: B017 - any failure will do; a success would be the bug
        hf_hub_download("org/corrupt", path, endpoint=cache.url, cache_dir=tmp_path / "client")
    status, _, body = raw_request(cache.url, "GET", url)
    assert status == 502 or len(body) < len(files[path]), "a complete corrupted body was served"
    assert body != files[path][: len(body)] or len(body) < len(files[path])
    metrics = cache.metrics()
    assert metrics["store_blobs"] == 0
    assert metrics["fills_failed_total"] >= 1

    fake_hub.corrupt.clear()
    good = hf_hub_download("org/corrupt", path, endpoint=cache.url, cache_dir=tmp_path / "again")
    assert Path(good).read_bytes() == files[path]


def test_clients_waiting_for_a_long_fill_do_not_time_out(
    fake_hub: FakeHub,
    start_cache: Callable[..., CacheProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is sent before the blob is verified; meanwhile interim responses (100 Continue)
    keep each client's read timeout from expiring, and every client skips them."""
    content = model_files(seed=29, shard_size=6 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/long", {SHARD: content}))
    fake_hub.bytes_per_second = 1 << 20  # six seconds, three times the clients' read timeout
    cache = start_cache()
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 2)
    host, port = cache.url.removeprefix("http://").split(":")

    def plain() -> bytes:
        connection = http.client.HTTPConnection(host, int(port), timeout=2)
        connection.request("GET", f"/org/long/resolve/{repo.commit}/{SHARD}")
        return connection.getresponse().read()

    with ThreadPoolExecutor(2) as pool:
        raw = pool.submit(plain)
        got = hf_hub_download("org/long", SHARD, endpoint=cache.url, cache_dir=tmp_path / "c")
        assert raw.result() == content
    assert Path(got).read_bytes() == content
    metrics = cache.metrics()
    assert (metrics["misses_total"], metrics["coalesced_total"], metrics["hits_total"]) == (
        1,
        1,
        0,
    ), "a client gave up and asked again"


def test_least_recently_used_blobs_go_first_under_the_size_limit(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    rng_files = model_files(seed=24)
    shards = {f"s{i}.safetensors": rng_files[SHARD][i * 1000 :] + bytes([i]) for i in range(4)}
    repo = fake_hub.add(FakeRepo("org/lru", shards))
    size = len(shards["s0.safetensors"])
    cache = start_cache("--max-store-size", str(3 * size + size // 2))

    def get(name: str) -> None:
        status, _, body = raw_request(cache.url, "GET", f"/org/lru/resolve/{repo.commit}/{name}")
        assert (status, body) == (200, shards[name])

    for name in (
        "s0",
        "s1",
        "s2",
        "s0",
        "s3",
    ):  # s1 is least recently used when s3 arrives
        get(f"{name}.safetensors")
    metrics = cache.metrics()
    assert metrics["store_bytes"] <= metrics["store_limit_bytes"]
    assert metrics["evictions"] == 1
    fake_hub.reset_counts()
    get("s0.safetensors")
    get("s2.safetensors")
    assert fake_hub.blob_gets.total() == 0, "a recently used blob was evicted"
    get("s1.safetensors")
    assert fake_hub.blob_gets["s1.safetensors"] == 1


def test_a_blob_larger_than_the_store_is_refused_with_the_fix(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=25)
    repo = fake_hub.add(FakeRepo("org/big", files))
    cache = start_cache("--max-store-size", "1Mi")
    status, headers, _ = raw_request(cache.url, "GET", f"/org/big/resolve/{repo.commit}/{SHARD}")
    assert status == 507
    assert "--max-store-size" in headers["X-Error-Message"]


def test_a_warm_cache_serves_while_the_hub_is_down(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=26)
    fake_hub.add(FakeRepo("org/offline", files))
    cache = start_cache("--ref-ttl", "0", "--auth-ttl", "0")
    first = hf_hub_download("org/offline", SHARD, endpoint=cache.url, cache_dir=tmp_path / "a")
    fake_hub.stop()
    again = hf_hub_download("org/offline", SHARD, endpoint=cache.url, cache_dir=tmp_path / "b")
    assert Path(again).read_bytes() == Path(first).read_bytes() == files[SHARD]


def test_many_clients_at_once_get_whole_blobs_and_ranges_and_every_byte_is_counted(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    """More transfers at once than the cache ever had sender threads, all from the event loop;
    ``served_bytes_total`` counts exactly the body bytes that left."""
    content = model_files(seed=30)[SHARD]
    repo = fake_hub.add(FakeRepo("org/many", {SHARD: content}))
    cache = start_cache()
    url = f"/org/many/resolve/{repo.commit}/{SHARD}"
    assert raw_request(cache.url, "GET", url)[2] == content  # the fill
    wait_until(lambda: cache.metrics()["fills_in_flight"] == 0, 20, "the fill to be put away")
    ranges = [None, "bytes=1000-", "bytes=-5000", "bytes=4096-1048575"] * 10

    def fetch(header: str | None) -> bytes:
        status, _, body = raw_request(cache.url, "GET", url, {"Range": header} if header else {})
        assert status == (206 if header else 200)
        return body

    with ThreadPoolExecutor(len(ranges)) as pool:
        bodies = list(pool.map(fetch, ranges))
    size = len(content)
    for header, body in zip(ranges, bodies, strict=True):
        first, _, last = (header or "bytes=0-").removeprefix("bytes=").partition("-")
        start = size - int(last) if not first else int(first)
        end = int(last) + 1 if first and last else size
        assert body == content[start:end], header
    metrics = cache.metrics()
    assert metrics["hits_total"] == len(ranges)
    assert metrics["served_bytes_total"] == size + sum(len(body) for body in bodies)


def test_a_body_behind_bytes_the_transport_still_holds_goes_by_asyncios_sendfile(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with every transport reporting bytes it still holds (headers a full socket did
    not take): the body waits for them and goes out by asyncio's sendfile, intact and counted."""
    files = model_files(seed=27)
    repo = fake_hub.add(FakeRepo("org/busy", files))
    monkeypatch.setattr(
        "asyncio.selector_events._SelectorSocketTransport.get_write_buffer_size", lambda _: 1
    )
    settings = Settings(
        upstream=fake_hub.url, store=tmp_path / "store", port=free_port(), host="127.0.0.1"
    )

    async def download_twice() -> list[bytes]:
        async with running(settings), aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{settings.port}/org/busy/resolve/{repo.commit}/{SHARD}"
            bodies = []
            for _ in range(2):  # a fill followed, then a stored blob
                async with session.get(url) as response:
                    bodies.append(await response.read())
            return bodies

    assert asyncio.run(download_twice()) == [files[SHARD]] * 2


def test_a_client_that_stops_reading_a_stored_blob_is_dropped(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with STALL_TIMEOUT at 1 s: a client that reads nothing of a stored blob's body
    loses its connection, instead of holding it and a sender thread for as long as it likes."""
    content = model_files(seed=29, shard_size=64 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/stall", {SHARD: content}))
    monkeypatch.setattr(responses, "STALL_TIMEOUT", 1.0)
    settings = Settings(
        upstream=fake_hub.url, store=tmp_path / "store", port=free_port(), host="127.0.0.1"
    )
    path = f"/org/stall/resolve/{repo.commit}/{SHARD}"

    async def stalled_read() -> int:
        loop = asyncio.get_running_loop()
        async with running(settings), aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{settings.port}{path}") as response:
                assert await response.read() == content  # the fill: the blob is stored now
            with socket.socket() as client:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client.setblocking(False)
                await loop.sock_connect(client, ("127.0.0.1", settings.port))
                await loop.sock_sendall(client, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                await asyncio.sleep(4)  # reads nothing: the socket buffers fill, sendfile stalls
                received = 0
                try:
                    while chunk := await loop.sock_recv(client, 1 << 20):
                        received += len(chunk)
                except ConnectionResetError:
                    pass
                return received

    assert asyncio.run(stalled_read()) < len(content), "the stalled transfer was not dropped"


def test_a_reader_whose_fill_ends_before_its_body_starts_still_sends_that_blob(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: the fill ends, closing its descriptor, while a reader is still sending its
    headers, and new sockets take the freed descriptor numbers meanwhile. The reader must still
    send the blob's own bytes: a descriptor duplicated after the fill ended would name one of them
    (a four-peer fan-out saw sendfile fail with ESPIPE, and the blob fetched upstream twice)."""
    content = model_files(seed=28)[SHARD]
    repo = fake_hub.add(FakeRepo("org/quick", {SHARD: content}))
    active: list[fills.Fills] = []
    # routes calls the start_body it imported from responses (patched in routes below)
    real_start_fill, real_start_body = fills.Fills.start, responses.start_body
    squatters: list[socket.socket] = []

    def start_fill(
        self: fills.Fills, key: BlobKey, size: int, sources: list[fills.Source]
    ) -> fills.Fill:
        active.append(self)
        return real_start_fill(self, key, size, sources)

    async def late_start_body(
        request: web.Request, headers: Mapping[str, str], size: int, byte_range: ByteRange | None
    ) -> tuple[web.StreamResponse, int, int]:
        deadline = asyncio.get_running_loop().time() + 30
        while any(len(each) for each in active):  # until every fill ended and closed its fd
            assert asyncio.get_running_loop().time() < deadline, "the fill did not end"
            await asyncio.sleep(0.01)
        for _ in range(8):
            squatters.extend(socket.socketpair())
        return await real_start_body(request, headers, size, byte_range)

    monkeypatch.setattr(fills.Fills, "start", start_fill)
    monkeypatch.setattr(routes, "start_body", late_start_body)
    settings = Settings(
        upstream=fake_hub.url, store=tmp_path / "store", port=free_port(), host="127.0.0.1"
    )

    async def download() -> bytes:
        async with running(settings), aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{settings.port}/org/quick/resolve/{repo.commit}/{SHARD}"
            async with session.get(url) as response:
                return await response.read()

    try:
        assert asyncio.run(download()) == content
    finally:
        for squatter in squatters:
            squatter.close()
    assert active, "the download did not go through a fill"
