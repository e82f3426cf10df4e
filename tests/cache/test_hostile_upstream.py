"""A hostile or broken upstream: wrong bytes, cut bodies, broken chunking, lying lengths, redirect
loops, slow drips, nonsense facts, deep JSON and huge bodies. Whatever it does, no client gets a
wrong byte, every fill ends within the upstream timeout, nothing is left behind in the store, and
the answer is the file or a 502 naming what upstream did (never a 500)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download
from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.waits import wait_until

SHARD = "model-00001-of-00002.safetensors"
TIMEOUT = 2  # --upstream-timeout for the tests that wait on a stalled upstream


def settled(cache: CacheProcess) -> None:
    """Every fill over, and nothing left of them: no partial blob, no temporary file."""
    wait_until(lambda: cache.metrics()["fills_in_flight"] == 0, 30, "the fills to end")
    assert cache.leftovers() == []


@pytest.mark.parametrize("path", [SHARD, "config.json"])  # an LFS file and a git file
@pytest.mark.parametrize("fault", ["corrupt", "long", "cut", "short"])
def test_a_body_broken_once_still_gives_the_client_the_right_file(
    fake_hub: FakeHub,
    start_cache: Callable[..., CacheProcess],
    tmp_path: Path,
    path: str,
    fault: str,
) -> None:
    # Over huggingface_hub's 10 MiB read size: a cut body leaves it whole chunks to resume from.
    files = model_files(seed=70, shard_size=24 << 20)
    fake_hub.add(FakeRepo("org/flaky", files))
    fake_hub.fault(path, fault, times=1)
    cache = start_cache()
    got = hf_hub_download("org/flaky", path, endpoint=cache.url, cache_dir=tmp_path / "c")
    assert Path(got).read_bytes() == files[path], f"{fault}: the client was handed a wrong file"
    settled(cache)


def test_no_byte_of_a_fill_that_fails_verification_reaches_any_reader(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    """Readers join a fill in flight, with and without ranges: every byte any of them receives is
    upstream's true byte, whether the answer completes or not."""
    content = model_files(seed=71, shard_size=4 << 20)[SHARD]
    repo = fake_hub.add(FakeRepo("org/liar", {SHARD: content}))
    fake_hub.corrupt.add(SHARD)
    fake_hub.bytes_per_second = 4 << 20
    cache = start_cache()
    url = f"/org/liar/resolve/{repo.commit}/{SHARD}"
    size = len(content)
    ranges = [None, "bytes=0-", f"bytes=0-{size * 3 // 4}", f"bytes={size // 4}-", "bytes=0-0"]

    def fetch(header: str | None) -> tuple[str | None, int, bytes]:
        status, _, body = raw_request(cache.url, "GET", url, {"Range": header} if header else {})
        return header, status, body

    with ThreadPoolExecutor(len(ranges)) as pool:
        results = list(pool.map(fetch, ranges))
    for header, status, body in results:
        start = int(header.split("=")[1].split("-")[0]) if header else 0
        if status < 300:
            assert body == content[start : start + len(body)], f"{header}: unverified bytes sent"
        else:
            assert status == 502, header
            assert content[:16] not in body
    settled(cache)
    assert cache.metrics()["store_blobs"] == 0


@pytest.mark.parametrize("fault", ["chunked-garbage", "chunked-stall", "drip", "hang"])
def test_a_fill_from_a_stalled_or_garbled_upstream_ends_with_a_502(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], fault: str
) -> None:
    files = model_files(seed=72)
    repo = fake_hub.add(FakeRepo("org/stall", files))
    fake_hub.fault(SHARD, fault)
    fake_hub.drip_interval = 0.5
    cache = start_cache("--upstream-timeout", str(TIMEOUT))
    began = time.monotonic()
    status, headers, body = raw_request(
        cache.url, "GET", f"/org/stall/resolve/{repo.commit}/{SHARD}"
    )
    took = time.monotonic() - began
    assert status == 502, (status, body[:200])
    assert headers["X-Error-Code"] == "FillFailed"
    assert files[SHARD][:16] not in body
    assert took < 40, f"the fill took {took:.0f} s to give up"
    settled(cache)
    # The same file with a healthy upstream: the failure was not remembered as the file.
    fake_hub.clear_faults()
    status, _, body = raw_request(cache.url, "GET", f"/org/stall/resolve/{repo.commit}/{SHARD}")
    assert (status, body) == (200, files[SHARD])


def test_no_token_reaches_the_log_or_an_error_message_whatever_upstream_answers(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    # aiohttp's repr of a response error holds the request's headers, Authorization included.
    files = model_files(seed=77)
    repo = fake_hub.add(FakeRepo("org/leaky", files, private=True, readers={"hf_secret"}))
    cache = start_cache("--upstream-timeout", str(TIMEOUT))
    auth = {"Authorization": "Bearer hf_secret"}
    for fault in ("garbled", "chunked-garbage", "hang"):
        fake_hub.fault("config.json", fault)  # a git file: from the Hub itself, token and all
        status, headers, body = raw_request(
            cache.url, "GET", f"/org/leaky/resolve/{repo.commit}/config.json", auth
        )
        assert status == 502, (fault, status)
        assert "hf_secret" not in headers.get("X-Error-Message", "") + body.decode(), fault
    settled(cache)
    assert "hf_secret" not in cache.log_text()


def test_a_redirect_loop_is_a_502_not_a_hang(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=73)
    fake_hub.add(FakeRepo("org/loop", files))
    fake_hub.fault(SHARD, "redirect-loop")
    cache = start_cache()
    for method in ("HEAD", "GET"):
        status, headers, _ = raw_request(cache.url, method, f"/org/loop/resolve/main/{SHARD}")
        assert status == 502, method
        assert "redirect" in headers["X-Error-Message"]


@pytest.mark.parametrize(
    "size", ["abc", "\u00b2", "-1", "1e3", "9" * 5000, "99999999999999999999999"]
)
def test_a_nonsense_size_from_upstream_is_a_502_naming_it(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], size: str
) -> None:
    files = model_files(seed=74)
    repo = fake_hub.add(FakeRepo("org/sizes", files))
    fake_hub.head_headers[SHARD] = {
        "X-Repo-Commit": repo.commit,
        "X-Linked-Etag": f'"{repo.etag(SHARD)}"',
        "X-Linked-Size": size,
    }
    cache = start_cache()
    for method in ("HEAD", "GET"):
        status, headers, _ = raw_request(cache.url, method, f"/org/sizes/resolve/main/{SHARD}")
        assert (status, headers["X-Error-Code"]) == (502, "BadUpstreamHead"), (method, size)
        assert "size in bytes" in headers["X-Error-Message"]
    settled(cache)


@pytest.mark.parametrize(
    "body", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[{]"]
)
def test_a_tree_listing_that_is_not_sane_json_is_a_502(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], body: bytes
) -> None:
    repo = fake_hub.add(FakeRepo("org/deep", model_files(seed=75)))
    fake_hub.tree_body = body
    cache = start_cache()
    status, headers, _ = raw_request(
        cache.url, "GET", f"/api/models/org/deep/tree/{repo.commit}?recursive=true"
    )
    assert (status, headers["X-Error-Code"]) == (502, "BadUpstreamJson")
    assert "Traceback" not in cache.log_text()


def test_a_huge_pass_through_body_streams_in_bounded_memory(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    size = 256 << 20
    fake_hub.large["/org/model/raw/main/big.bin"] = size
    cache = start_cache()
    before = cache.rss()
    host, port = cache.url.removeprefix("http://").split(":")
    import http.client

    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request("GET", "/org/model/raw/main/big.bin")
    response = connection.getresponse()
    assert response.status == 200
    digest, received = hashlib.sha256(), 0
    while chunk := response.read(1 << 20):
        digest.update(chunk)
        received += len(chunk)
    connection.close()
    block = bytes(range(256)) * 4096
    expected = hashlib.sha256(block * (size // len(block))).hexdigest()
    assert (received, digest.hexdigest()) == (size, expected)
    growth = cache.peak_rss() - before
    assert growth < 64 << 20, (
        f"the cache grew by {growth >> 20} MiB passing {size >> 20} MiB through"
    )


def test_concurrent_cold_requests_for_one_file_share_one_head_upstream(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=76)
    fake_hub.add(FakeRepo("org/herd", files))
    fake_hub.head_delay = 1.0  # every request arrives before upstream's first answer
    cache = start_cache()
    url = f"/org/herd/resolve/main/{SHARD}"
    with ThreadPoolExecutor(200) as pool:
        results = list(pool.map(lambda _: raw_request(cache.url, "GET", url), range(200)))
    assert {(status, body == files[SHARD]) for status, _, body in results} == {(200, True)}
    assert fake_hub.requests["head"] == 1, f"{fake_hub.requests['head']} HEADs went upstream"
    assert fake_hub.blob_gets[SHARD] == 1


def test_tree_listings_with_junk_parameters_stay_within_the_store_limit(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = {f"dir/file-{index:04d}.txt": b"%d" % index for index in range(400)}
    repo = fake_hub.add(FakeRepo("org/wide", files))
    fake_hub.page_size = 1000  # one page of 400 entries, about 60 KiB
    limit = 1 << 20
    cache = start_cache("--max-store-size", str(limit))
    for junk in range(60):
        status, _, _ = raw_request(
            cache.url, "GET", f"/api/models/org/wide/tree/{repo.commit}?recursive=true&junk={junk}"
        )
        assert status == 200
    on_disk = sum(p.stat().st_size for p in cache.store.rglob("*") if p.is_file())
    assert on_disk <= limit, f"the store holds {on_disk} bytes past its {limit}-byte limit"
    assert cache.metrics()["store_bytes"] <= limit
