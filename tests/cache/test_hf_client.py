"""The real huggingface_hub client (library and `hf` command) through the cache to the fake Hub."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download, snapshot_download
from multinode_llm_testing.cache import (
    CacheProcess,
    assert_same_files,
    hf_env,
    model_files,
    raw_request,
)
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

BLOB_KINDS = ("get", "cdn")  # requests whose bodies are file bytes


def blob_requests(hub: FakeHub) -> int:
    return sum(hub.requests[kind] for kind in BLOB_KINDS)


def test_snapshot_download_is_byte_identical_and_a_warm_one_fetches_no_blob(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files()
    fake_hub.add(FakeRepo("org/model", files))
    cache = start_cache()

    cold = snapshot_download("org/model", endpoint=cache.url, cache_dir=tmp_path / "client1")
    assert_same_files(Path(cold), files)
    assert fake_hub.requests["tree"] >= 3, "the listing should have paged (page size 3)"
    assert fake_hub.blob_gets.total() == len(files)
    assert fake_hub.client_requests == 0, "the client went around the cache"
    assert fake_hub.requests["xet-read-token"] == 0, "a Xet signal leaked to the client"

    fake_hub.reset_counts()
    warm = snapshot_download("org/model", endpoint=cache.url, cache_dir=tmp_path / "client2")
    assert_same_files(Path(warm), files)
    assert blob_requests(fake_hub) == 0, f"warm download asked upstream: {dict(fake_hub.requests)}"
    assert fake_hub.requests["head"] == 0, "file facts of a commit are immutable: no HEAD when warm"
    metrics = cache.metrics()
    assert metrics["misses_total"] == len(files), "each blob should have been filled once"
    assert metrics["upstream_bytes_total"] == sum(map(len, files.values()))


def test_hf_hub_download_of_a_branch_then_warm_from_a_second_client(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=1)
    fake_hub.add(FakeRepo("org/branchy", files))
    cache = start_cache()
    name = "model-00001-of-00002.safetensors"

    first = hf_hub_download(
        "org/branchy",
        name,
        revision="main",
        endpoint=cache.url,
        cache_dir=tmp_path / "a",
    )
    assert Path(first).read_bytes() == files[name]
    fake_hub.reset_counts()
    second = hf_hub_download(
        "org/branchy",
        name,
        revision="main",
        endpoint=cache.url,
        cache_dir=tmp_path / "b",
    )
    assert Path(second).read_bytes() == files[name]
    assert blob_requests(fake_hub) == 0
    assert fake_hub.requests["head"] == 0, "the ref is fresh for --ref-ttl: no HEAD upstream"


def test_hf_command_downloads_through_the_cache_and_the_token_never_reaches_the_cdn(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or shutil.which("hf")
    if hf is None:
        pytest.skip("the `hf` command of huggingface_hub is not installed in this environment")
    files = model_files(seed=2)
    fake_hub.add(FakeRepo("org/cli", files, private=True, readers={"hf_reader"}))
    cache = start_cache()
    target = tmp_path / "out"
    result = subprocess.run(
        [hf, "download", "org/cli", "--local-dir", str(target)],
        env=hf_env(cache.url, tmp_path / "home", token="hf_reader"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert_same_files(target, files)
    assert fake_hub.requests["cdn"] >= 2, "LFS files should have come through the fake CDN"
    assert fake_hub.auth_at_cdn == 0, "the caller's token was sent to another origin"
    assert fake_hub.client_requests == 0


def test_xet_signals_never_reach_the_client(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    files = model_files(seed=3)
    repo = fake_hub.add(FakeRepo("org/xet", files))
    cache = start_cache()
    path = "/org/xet/resolve/main/model-00001-of-00002.safetensors"
    status, headers, _ = raw_request(cache.url, "HEAD", path)
    assert status == 200
    assert not [name for name in headers if name.lower().startswith("x-xet")], dict(headers)
    assert "xet" not in headers.get("Link", ""), headers.get("Link")
    assert headers["X-Repo-Commit"] == repo.commit
    assert headers["ETag"] == f'"{repo.etag("model-00001-of-00002.safetensors")}"'

    status, headers, body = raw_request(
        cache.url, "GET", f"/api/models/org/xet/tree/{repo.commit}?recursive=true"
    )
    assert status == 200
    assert b"xetHash" not in body
    link = headers["Link"]
    assert link.startswith(f"<{cache.url}/api/models/org/xet/tree/{repo.commit}?"), link
    assert 'rel="next"' in link


def test_missing_file_and_revision_keep_the_hub_error_codes(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    repo = fake_hub.add(FakeRepo("org/errs", model_files(seed=4)))
    cache = start_cache()
    status, headers, _ = raw_request(cache.url, "HEAD", "/org/errs/resolve/main/nope.txt")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (
        404,
        "EntryNotFound",
        repo.commit,
    )
    status, headers, _ = raw_request(cache.url, "GET", "/api/models/org/errs/revision/v9")
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    status, _, _ = raw_request(
        cache.url, "GET", f"/api/models/org/errs/xet-read-token/{repo.commit}"
    )
    assert status == 404


def test_health_and_metrics_endpoints(start_cache: Callable[..., CacheProcess]) -> None:
    cache = start_cache()
    assert raw_request(cache.url, "GET", "/live")[0] == 200
    status, _, body = raw_request(cache.url, "GET", "/ready")
    assert (status, b'"ready": true' in body) == (200, True)
    status, headers, body = raw_request(cache.url, "GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    for name in ("hits", "misses", "upstream_bytes", "peer_bytes", "served_bytes"):
        assert f"# TYPE multinode_llm_cache_{name}_total counter" in body.decode()


def test_a_pull_request_revision_travels_as_one_encoded_segment(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=5)
    repo = fake_hub.add(FakeRepo("org/pr", files))
    cache = start_cache()
    got = hf_hub_download(
        "org/pr", "config.json", revision="refs/pr/1", endpoint=cache.url, cache_dir=tmp_path / "c"
    )
    assert Path(got).read_bytes() == files["config.json"]
    assert f"snapshots/{repo.commit}" in got, "the client should have learned the PR's commit"
    status, _, body = raw_request(cache.url, "GET", "/api/models/org/pr/revision/refs%2Fpr%2F1")
    assert status == 200
    assert repo.commit.encode() in body
