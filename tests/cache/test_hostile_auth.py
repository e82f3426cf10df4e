"""Gated and private repos probed through every route: a gated byte (or a gated file's facts) leaves
the cache only for a caller whose own credential the Hub has just accepted for that file, whatever
repo metadata, other callers, peers, cookies or the cache's own environment say."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import GatedRepoError
from multinode_llm_testing.cache import CacheProcess, assert_same_files, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

SHARD = "model-00001-of-00002.safetensors"
FILES = model_files(seed=60)
PEER_HEADER = "X-Multinode-Llm-Peer"


@pytest.fixture
def gated(fake_hub: FakeHub) -> FakeRepo:
    # The Hub lets anyone read some files of a gated repo (its README): the cache must not learn
    # from one such success that the rest is public.
    return fake_hub.add(
        FakeRepo("org/gated", FILES, gated=True, readers={"alice"}, ungated={"README.md"})
    )


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def leaks(
    cache: CacheProcess, repo: FakeRepo, headers: dict[str, str], allowed: set[int]
) -> list[str]:
    """Every way of asking for a gated file's bytes or facts; each answer that gave something away
    (a success, a status outside ``allowed``, or any of the file's bytes)."""
    found = []
    for path in (SHARD, "config.json"):
        content = FILES[path]
        for method, revision, extra in (
            ("HEAD", "main", {}),
            ("HEAD", repo.commit, {}),
            ("GET", "main", {}),
            ("GET", repo.commit, {}),
            ("GET", repo.commit, {"Range": "bytes=0-"}),
            ("GET", "main", {"Range": "bytes=1-10"}),
        ):
            url = f"/{repo.repo_id}/resolve/{revision}/{path}"
            status, reply, body = raw_request(cache.url, method, url, {**headers, **extra})
            if status not in allowed or content[:16] in body or content[1:11] in body:
                found.append(f"{method} {url} {extra}: {status}, {len(body)} bytes")
            if status < 400 and reply.get("ETag"):
                found.append(f"{method} {url}: the file's ETag {reply['ETag']} given away")
    return found


def warm(cache: CacheProcess, repo: FakeRepo, tmp_path: Path, token: str | bool = "alice") -> None:
    got = snapshot_download(
        repo.repo_id, endpoint=cache.url, cache_dir=tmp_path / f"warm-{token}", token=token
    )
    assert_same_files(Path(got), repo.files)


def test_after_a_reader_warmed_it_no_one_else_gets_a_gated_byte(
    fake_hub: FakeHub, gated: FakeRepo, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    cache = start_cache()
    warm(cache, gated, tmp_path)
    assert leaks(cache, gated, {}, {401}) == []
    assert leaks(cache, gated, bearer("mallory"), {403}) == []
    # A client claiming to be a peer is authorized like any other.
    assert leaks(cache, gated, {PEER_HEADER: "10.0.0.9:8090"}, {401}) == []
    status, _, body = raw_request(
        cache.url, "GET", f"/org/gated/resolve/main/{SHARD}", {**bearer("alice"), PEER_HEADER: "x"}
    )
    assert (status, body) == (200, FILES[SHARD])
    with pytest.raises(GatedRepoError):
        hf_hub_download(
            "org/gated", SHARD, endpoint=cache.url, cache_dir=tmp_path / "a", token=False
        )


@pytest.mark.parametrize(
    "shaped",
    [
        "/api/models/org/gated?expand=private",
        "/api/models/org/gated/revision/main?expand=private",
        "/api/models/org/gated?expand=private&expand=sha",
        "/api/models/org/gated/revision/main?expand=lastModified",
    ],
)
def test_repo_info_a_client_shapes_teaches_the_cache_nothing(
    fake_hub: FakeHub,
    gated: FakeRepo,
    start_cache: Callable[..., CacheProcess],
    tmp_path: Path,
    shaped: str,
) -> None:
    # With only the fields asked for, the answer lacks "gated": that must not read "not gated".
    cache = start_cache()
    warm(cache, gated, tmp_path)
    status, _, body = raw_request(cache.url, "GET", shaped)
    assert status == 200, body
    assert b'"gated"' not in body
    assert leaks(cache, gated, {}, {401}) == []


def test_model_info_with_expand_through_the_library_teaches_nothing(
    fake_hub: FakeHub, gated: FakeRepo, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    cache = start_cache()
    warm(cache, gated, tmp_path)
    info = HfApi(endpoint=cache.url, token=False).model_info("org/gated", expand=["private"])
    assert info.private is False
    assert leaks(cache, gated, {}, {401}) == []


def test_one_anonymous_success_does_not_make_a_repo_public(
    fake_hub: FakeHub, gated: FakeRepo, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    cache = start_cache()
    warm(cache, gated, tmp_path)
    readme = hf_hub_download(
        "org/gated", "README.md", endpoint=cache.url, cache_dir=tmp_path / "anon", token=False
    )
    assert Path(readme).read_bytes() == FILES["README.md"]
    assert leaks(cache, gated, {}, {401}) == []


@pytest.mark.parametrize("how", ["stopped", "resetting", "failing"])
def test_when_the_hub_cannot_be_asked_gated_files_are_refused_and_public_ones_served(
    fake_hub: FakeHub,
    gated: FakeRepo,
    start_cache: Callable[..., CacheProcess],
    tmp_path: Path,
    how: str,
) -> None:
    public_files = model_files(seed=61)
    public = fake_hub.add(FakeRepo("org/public", public_files))
    cache = start_cache("--auth-ttl", "0", "--ref-ttl", "0")
    warm(cache, gated, tmp_path)
    warm(cache, public, tmp_path, token=False)
    # Anyone may read the gated repo's README: that says nothing about its other files.
    status, _, _ = raw_request(cache.url, "GET", "/org/gated/resolve/main/README.md")
    assert status == 200
    if how == "stopped":
        fake_hub.stop()
    elif how == "resetting":
        fake_hub.outage = True
    else:
        fake_hub.failing = 503
    # Fail closed: not even alice, whose last decision has expired, nor anyone else.
    for headers in ({}, bearer("alice"), bearer("mallory")):
        assert leaks(cache, gated, headers, {502, 503, 504}) == [], headers
    for path, content in public_files.items():
        status, _, body = raw_request(cache.url, "GET", f"/org/public/resolve/main/{path}")
        assert (status, body) == (200, content), path


def test_a_netrc_in_the_cache_environment_lends_no_one_its_credential(
    fake_hub: FakeHub, gated: FakeRepo, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    # aiohttp (like requests) sends ~/.netrc's credentials when a request has none of its own.
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {fake_hub.host} login cache password alice\n")
    netrc.chmod(0o600)
    env = {**os.environ, "NETRC": str(netrc), "HOME": str(tmp_path)}
    (tmp_path / ".netrc").write_text(netrc.read_text())
    (tmp_path / ".netrc").chmod(0o600)
    cache = start_cache(env=env)
    warm(cache, gated, tmp_path)
    assert leaks(cache, gated, {}, {401}) == []
    assert leaks(cache, gated, bearer("mallory"), {403}) == []
    basic = "Basic " + base64.b64encode(b"cache:alice").decode()
    sent = [seen for seen in fake_hub.requests_seen if seen[2] == basic]
    assert sent == [], f"the cache sent its netrc credential upstream: {sent[:3]}"


def test_a_session_cookie_the_hub_sets_is_never_replayed_for_another_caller(
    fake_hub: FakeHub, gated: FakeRepo, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    # A cookie jar shared by all callers would carry alice's session into everyone's requests; the
    # jar ignores cookies of IP addresses, so the Hub is reached by name, as huggingface.co is.
    fake_hub.session_cookies = True
    cache = start_cache(upstream=f"http://localhost:{fake_hub.port}")
    warm(cache, gated, tmp_path)
    assert leaks(cache, gated, {}, {401}) == []
    anonymous = [seen for seen in fake_hub.requests_seen if seen[2] is None]
    assert anonymous, "anonymous requests should have reached the hub"
    replayed = [seen for seen in anonymous if seen[3]]
    assert replayed == [], f"a cookie rode along on anonymous requests: {replayed[:3]}"
