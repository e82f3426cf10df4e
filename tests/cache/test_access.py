"""Private and gated repos, and paths that try to escape: the cache is no way around the Hub."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download, snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
from multinode_llm_testing.cache import CacheProcess, assert_same_files, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.waits import wait_until

SHARD = "model-00001-of-00002.safetensors"


def test_one_identity_cached_gated_file_never_reaches_another(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=10)
    repo = fake_hub.add(FakeRepo("org/gated", files, gated=True, readers={"alice"}))
    cache = start_cache()

    got = snapshot_download(
        "org/gated", endpoint=cache.url, cache_dir=tmp_path / "alice", token="alice"
    )
    assert_same_files(Path(got), files)

    for token, status in (("bob", 403), (None, 401)):
        heads_before = fake_hub.requests["head"]
        with pytest.raises(GatedRepoError):
            hf_hub_download(
                "org/gated",
                SHARD,
                endpoint=cache.url,
                cache_dir=tmp_path / f"c{token}",
                token=token or False,
            )
        assert fake_hub.requests["head"] > heads_before, (
            "the cache must ask upstream about a new caller"
        )
        # Even by commit, straight at the bytes, nothing cached comes out.
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        code, reply_headers, body = raw_request(
            cache.url, "GET", f"/org/gated/resolve/{repo.commit}/{SHARD}", headers
        )
        assert (code, reply_headers["X-Error-Code"]) == (status, "GatedRepo")
        assert files[SHARD][:64] not in body


def test_private_repo_listings_and_files_stay_private(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=11)
    repo = fake_hub.add(FakeRepo("org/private", files, private=True, readers={"alice"}))
    cache = start_cache()
    snapshot_download(
        "org/private", endpoint=cache.url, cache_dir=tmp_path / "alice", token="alice"
    )

    with pytest.raises(RepositoryNotFoundError):
        snapshot_download(
            "org/private", endpoint=cache.url, cache_dir=tmp_path / "anon", token=False
        )
    code, _, body = raw_request(
        cache.url, "GET", f"/api/models/org/private/tree/{repo.commit}?recursive=true"
    )
    assert code == 401
    assert b"safetensors" not in body, "a cached private listing leaked"
    code, _, body = raw_request(cache.url, "GET", f"/org/private/resolve/{repo.commit}/{SHARD}")
    assert code == 401
    assert files[SHARD][:64] not in body


def test_access_decisions_expire(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=12)
    repo = fake_hub.add(FakeRepo("org/revoked", files, gated=True, readers={"alice"}))
    cache = start_cache("--auth-ttl", "1")
    auth = {"Authorization": "Bearer alice"}
    url = f"/org/revoked/resolve/{repo.commit}/{SHARD}"
    assert raw_request(cache.url, "GET", url, auth)[0] == 200

    repo.readers.clear()  # the Hub withdraws alice's access

    def refused() -> int | None:
        status = raw_request(cache.url, "GET", url, auth)[0]
        return None if status == 200 else status

    status = wait_until(
        refused, 10, "the cache to stop honouring a withdrawn access after --auth-ttl", 0.2
    )
    assert status == 403, f"a withdrawn access answered {status}, not 403"


TRICKS = [
    "/org/model/resolve/main/../../etc/passwd",
    "/org/model/resolve/main/%2e%2e/%2e%2e/etc/passwd",
    "/org/model/resolve/main/sub%2F..%2F..%2Fetc%2Fpasswd",
    "/org/model/resolve/main//etc/passwd",
    "/org/model/resolve/main/%2Fetc%2Fpasswd",
    "/org/model/resolve/main/a%5c..%5cb",
    "/org/model/resolve/main/%252e%252e/x",
    "/org/model/resolve/main/a%00b",
    "/org/model/resolve/..%2F..%2Fmain/config.json",
    "/../org/model/resolve/main/config.json",
    "/org/../model/resolve/main/config.json",
    "/api/models/org/model/tree/main/..%2F..",
    "/api/../../etc/passwd",
    "/api/models/org/..%2F..%2Fetc/revision/main",
    "/org/model/resolve/main/%ff%fe",
    "//org/model/resolve/main/config.json",
]


@pytest.mark.parametrize("path", TRICKS)
def test_path_tricks_get_400_and_never_reach_upstream(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], path: str
) -> None:
    fake_hub.add(FakeRepo("org/model", model_files(seed=13)))
    cache = start_cache()
    fake_hub.reset_counts()
    for method in ("GET", "HEAD"):
        status, headers, _ = raw_request(cache.url, method, path)
        assert status == 400, f"{method} {path} answered {status}"
    assert headers["X-Error-Code"] == "BadRequest"
    assert fake_hub.requests.total() == 0, f"{path} reached upstream: {dict(fake_hub.requests)}"


def test_the_cache_only_reads(fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]) -> None:
    fake_hub.add(FakeRepo("org/model", model_files(seed=14)))
    cache = start_cache()
    for method, path in (
        ("DELETE", "/api/repos/delete"),
        ("PUT", "/api/models/org/model/settings"),
    ):
        status, headers, _ = raw_request(cache.url, method, path, {"Authorization": "Bearer alice"})
        assert (status, headers["X-Error-Code"]) == (405, "MethodNotAllowed")
    assert fake_hub.requests.total() == 0
    status, _, body = raw_request(
        cache.url, "GET", "/api/whoami-v2", {"Authorization": "Bearer alice"}
    )
    assert (status, body) == (200, b'{"name": "alice"}')
