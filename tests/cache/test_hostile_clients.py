"""Hostile clients: odd ranges, malformed requests, slowloris, connection floods, clients that hang
up. Bad input gets a 4xx (or, for what is not HTTP, a closed connection), never a 5xx and never a
traceback in the log; slow and idle connections are closed; the cache's descriptors, memory and
store come back to where they were."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.waits import wait_until

SHARD = "model-00001-of-00002.safetensors"
CLIENT_TIMEOUT = 2  # --client-timeout: seconds for a request's head, or its body, to arrive


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def status_of(reply: bytes) -> int | None:
    """The status of a raw reply, or None when the connection closed without one."""
    if not reply.startswith(b"HTTP/1."):
        return None
    return int(reply.split(b" ", 2)[1])


def exchange(url: str, data: bytes) -> bytes:
    with connect(url) as client:
        try:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the cache may close before reading it all: a refusal too
        chunks = []
        try:
            while chunk := client.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
        return b"".join(chunks)


def assert_quiet_log(text: str) -> None:
    noisy = [line for line in text.splitlines() if "Traceback" in line or " ERROR " in line]
    assert noisy == [], "\n".join(noisy[:5])


@pytest.mark.parametrize(
    "header",
    [
        "bytes=" + "9" * 5000 + "-",
        "bytes=0-" + "9" * 5000,
        "bytes=-" + "9" * 5000,
        "bytes=99999999999999999999-",
        "bytes=0-99999999999999999999",
        "bytes=\u0661-\u0662",  # Arabic-Indic digits: int() takes them, HTTP does not
        "bytes=--1",
        "bytes=1-0",
        "bytes=0-0,5-6",
        "bytes=",
        "bytes=-",
        "bits=0-1",
        "bytes=1-2-3",
        " bytes = 5 - 9 ",
    ],
)
def test_odd_ranges_get_the_file_a_range_or_a_416_never_a_5xx(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], header: str
) -> None:
    files = model_files(seed=80)
    repo = fake_hub.add(FakeRepo("org/ranges", files))
    cache = start_cache()
    content = files[SHARD]
    for _stored in (False, True):
        status, headers, body = raw_request(
            cache.url,
            "GET",
            f"/org/ranges/resolve/{repo.commit}/{SHARD}",
            {"Range": header.encode()},  # as bytes: UTF-8 where it is not Latin-1
        )
        assert status in (200, 206, 416), (header, status, body[:200])
        if status == 200:
            assert body == content
        elif status == 206:
            first, _, rest = headers["Content-Range"].removeprefix("bytes ").partition("-")
            assert body == content[int(first) : int(first) + len(body)]
            assert rest.endswith(f"/{len(content)}")
        else:
            assert headers["Content-Range"] == f"bytes */{len(content)}"
    assert_quiet_log(cache.log_text())


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200),  # a TLS hello
    b"GET /x HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(300)) + b"\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"POST /api/models/org/model/paths-info/main HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
    b"GET /org/model/resolve/main/config.json HTTP/1.1\r\nHost: x\r\n"
    b"Authorization: Bearer \xff\xfe\r\n\r\n",
    b"GET /org/model/resolve/main/config.json HTTP/1.1\r\nHost: x\r\nRange: bytes=\xff-\r\n\r\n",
    b"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\nAuthorization: \x7f\x01\r\n\r\n",
    b"GET /org/model/resolve/main/config.json?%ff%fe=%00 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://evil.example/org/model/resolve/main/config.json HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
]


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_requests_get_a_4xx_and_leave_no_traceback(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], data: bytes
) -> None:
    fake_hub.add(FakeRepo("org/model", model_files(seed=81)))
    cache = start_cache()
    reply = exchange(cache.url, data)
    status = status_of(reply)
    assert status is None or 400 <= status < 500 or status == 200, reply[:300]
    assert raw_request(cache.url, "GET", "/live")[0] == 200
    assert_quiet_log(cache.log_text())


def test_a_request_body_too_large_or_too_slow_is_refused(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    fake_hub.add(FakeRepo("org/model", model_files(seed=82)))
    cache = start_cache("--client-timeout", str(CLIENT_TIMEOUT))
    head = b"POST /api/models/org/model/paths-info/main HTTP/1.1\r\nHost: x\r\n"
    big = b"paths=" + b"a" * (4 << 20)
    reply = exchange(cache.url, head + b"Content-Length: %d\r\n\r\n" % len(big) + big)
    assert status_of(reply) == 413, reply[:200]
    with connect(cache.url) as client:
        client.sendall(head + b"Content-Length: 1000\r\n\r\npaths=a")
        began = time.monotonic()
        reply = client.recv(65536)
        while chunk := client.recv(65536):
            reply += chunk
        assert time.monotonic() - began < CLIENT_TIMEOUT + 10, "a stalled body was waited on"
    assert status_of(reply) in (None, 408), reply[:200]
    assert_quiet_log(cache.log_text())


@pytest.mark.parametrize("drip", [False, True])
def test_slowloris_connections_are_closed_while_others_are_served(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], drip: bool
) -> None:
    fake_hub.add(FakeRepo("org/model", model_files(seed=83)))
    cache = start_cache("--client-timeout", str(CLIENT_TIMEOUT))
    baseline = cache.open_fds()
    slow = [connect(cache.url) for _ in range(200)]
    for client in slow:
        client.sendall(b"GET /org/model/resolve/main/config.json HTTP/1.1\r\nHost: x\r\n")
        client.setblocking(False)
    open_ = set(range(len(slow)))
    deadline = time.monotonic() + CLIENT_TIMEOUT + 15
    served = False
    try:
        while open_ and time.monotonic() < deadline:
            for index in list(open_):
                try:
                    if drip:
                        slow[index].send(b"X")  # a byte now and then must not keep it open
                    if slow[index].recv(65536) == b"":
                        open_.discard(index)
                except BlockingIOError:
                    pass
                except OSError:
                    open_.discard(index)
            if not served:
                status, _, _ = raw_request(cache.url, "GET", "/org/model/resolve/main/config.json")
                assert status == 200, "a normal client was not served during the slowloris"
                served = True
            time.sleep(0.2)
        assert not open_, f"{len(open_)} of 200 slow connections still open after the timeout"
    finally:
        for client in slow:
            client.close()
    wait_until(lambda: cache.open_fds() <= baseline + 5, 10, "the cache to close the connections")
    assert_quiet_log(cache.log_text())


def test_a_connection_flood_is_held_under_the_limit_and_probes_still_answer(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    cache = start_cache("--max-connections", "50", "--client-timeout", "30")
    baseline = cache.open_fds()
    flood = []
    try:
        for _ in range(150):
            flood.append(connect(cache.url))
            if len(flood) % 25 == 0:
                assert raw_request(cache.url, "GET", "/live")[0] == 200, len(flood)
        wait_until(lambda: cache.open_fds() <= baseline + 55, 10, "the cache to shed connections")
        assert raw_request(cache.url, "GET", "/ready")[0] == 200
    finally:
        for client in flood:
            client.close()
    wait_until(lambda: cache.open_fds() <= baseline + 5, 10, "the descriptors to come back")
    assert cache.metrics()["connections_shed_total"] >= 100


def test_clients_that_hang_up_at_any_point_leave_nothing_behind(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    content = model_files(seed=84, shard_size=16 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/quitters", {SHARD: content}))
    fake_hub.bytes_per_second = 16 << 20
    cache = start_cache()
    baseline, rss = cache.open_fds(), cache.rss()
    request = f"GET /org/quitters/resolve/{repo.commit}/{SHARD} HTTP/1.1\r\nHost: x\r\n".encode()
    rng = random.Random(84)

    def quit_early(index: int) -> None:
        extra = b"Range: bytes=%d-\r\n" % rng.randrange(len(content)) if index % 3 == 0 else b""
        with connect(cache.url) as client:
            client.sendall(request + extra + b"\r\n")
            if index % 4:
                client.recv(rng.choice([1, 1000, 1 << 20]))
            client.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(quit_early, range(60)))
    wait_until(lambda: cache.metrics()["store_blobs"] == 1, 60, "the fill to finish anyway")
    status, _, body = raw_request(cache.url, "GET", f"/org/quitters/resolve/{repo.commit}/{SHARD}")
    assert (status, body == content) == (200, True)
    assert fake_hub.blob_gets[SHARD] == 1
    with ThreadPoolExecutor(20) as pool:  # and again, now from the store
        list(pool.map(quit_early, range(60)))
    wait_until(lambda: cache.open_fds() <= baseline + 3, 20, "descriptors to be closed")
    assert cache.leftovers() == []
    assert cache.rss() - rss < 64 << 20
    assert_quiet_log(cache.log_text())
