"""A store on a small disk of its own (a tmpfs mounted for the test): the cache evicts before the
disk fills, refuses what cannot fit with a 507 that says so, keeps answering what needs no room,
and never leaves a partial blob or a temporary file behind."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.waits import wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None,
    reason="mounting a small tmpfs for the store needs root and mount(8)",
)

SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill_up(disk: Path) -> Path:
    """A file of someone else's that takes every free byte of ``disk``."""
    hog = disk / "hog"
    with hog.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(bytes(64 << 10))
        except OSError:
            pass
    return hog


def shards(count: int, size: int, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"s{index}.safetensors": rng.randbytes(size) for index in range(count)}


def test_the_store_evicts_before_its_disk_fills(
    fake_hub: FakeHub, small_disk: Path, start_cache: Callable[..., CacheProcess]
) -> None:
    files = shards(6, 3 << 19, seed=90)  # 6 x 1.5 MiB on an 8 MiB disk, no --max-store-size
    repo = fake_hub.add(FakeRepo("org/many", files))
    cache = start_cache(store=small_disk / "store")
    for name, content in files.items():
        status, headers, body = raw_request(
            cache.url, "GET", f"/org/many/resolve/{repo.commit}/{name}"
        )
        assert (status, body == content) == (200, True), (
            name,
            status,
            headers.get("X-Error-Message"),
        )
    assert cache.metrics()["evictions"] >= 1
    assert "No space left" not in cache.log_text()
    assert cache.leftovers() == []


def test_a_blob_bigger_than_the_disk_is_refused_with_a_507_that_says_so(
    fake_hub: FakeHub, small_disk: Path, start_cache: Callable[..., CacheProcess]
) -> None:
    files = shards(1, 12 << 20, seed=91)
    repo = fake_hub.add(FakeRepo("org/huge", files))
    cache = start_cache(store=small_disk / "store")
    status, headers, _ = raw_request(
        cache.url, "GET", f"/org/huge/resolve/{repo.commit}/s0.safetensors"
    )
    assert status == 507
    message = headers["X-Error-Message"]
    assert str(small_disk / "store") in message, message
    assert "free" in message, message
    assert cache.leftovers() == []


def test_a_full_disk_still_answers_what_needs_no_room_and_leaves_no_temporary_file(
    fake_hub: FakeHub, small_disk: Path, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=92)
    repo = fake_hub.add(FakeRepo("org/full", files))
    cache = start_cache(store=small_disk / "store")
    hog = fill_up(small_disk)
    for path in files:
        status, _, _ = raw_request(cache.url, "HEAD", f"/org/full/resolve/main/{path}")
        assert status == 200, (path, status)
    status, _, _ = raw_request(cache.url, "GET", f"/api/models/org/full/tree/{repo.commit}")
    assert status == 200
    status, headers, body = raw_request(cache.url, "GET", f"/org/full/resolve/main/{SHARD}")
    assert status == 507, status
    assert "free" in headers["X-Error-Message"]
    assert cache.leftovers() == []
    assert "Traceback" not in cache.log_text()
    hog.unlink()
    status, _, body = raw_request(cache.url, "GET", f"/org/full/resolve/main/{SHARD}")
    assert (status, body == files[SHARD]) == (200, True)


def test_the_disk_filling_during_a_fill_fails_it_with_a_507_and_no_partial_body(
    fake_hub: FakeHub, small_disk: Path, start_cache: Callable[..., CacheProcess]
) -> None:
    content = shards(1, 4 << 20, seed=93)["s0.safetensors"]
    repo = fake_hub.add(FakeRepo("org/race", {SHARD: content}))
    fake_hub.bytes_per_second = 2 << 20
    cache = start_cache(store=small_disk / "store")
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            raw_request, cache.url, "GET", f"/org/race/resolve/{repo.commit}/{SHARD}"
        )
        wait_until(lambda: fake_hub.blob_bytes[SHARD] >= 1 << 20, 30, "the fill to be under way")
        hog = fill_up(small_disk)
        status, headers, body = answer.result(60)
    assert status == 507, status
    assert "filled up" in headers["X-Error-Message"]
    assert content[:16] not in body
    wait_until(lambda: cache.metrics()["fills_in_flight"] == 0, 30, "the fill to end")
    assert cache.leftovers() == []
    hog.unlink()
    status, _, body = raw_request(cache.url, "GET", f"/org/race/resolve/{repo.commit}/{SHARD}")
    assert (status, body == content) == (200, True)
