"""Pure logic of the cache: paths, ranges, sizes, links, keys, owners (no processes, no network)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from multinode_llm.cache import paths
from multinode_llm.cache.peers import rendezvous
from multinode_llm.cache.ranges import ByteRange, UnsatisfiableRangeError, parse_range
from multinode_llm.cache.sanitize import clean_json, next_link, rewrite_links
from multinode_llm.cache.store import BlobKey, parse_size

COMMIT = "a" * 40


@pytest.mark.parametrize(
    ("raw", "repo", "revision", "path"),
    [
        ("/org/model/resolve/main/config.json", "org/model", "main", "config.json"),
        ("/gpt2/resolve/main/config.json", "gpt2", "main", "config.json"),
        (
            "/datasets/org/data/resolve/v1.0/a/b.parquet",
            "org/data",
            "v1.0",
            "a/b.parquet",
        ),
        (
            "/org/model/resolve/refs%2Fpr%2F1/w%20x.bin",
            "org/model",
            "refs/pr/1",
            "w x.bin",
        ),
        (
            f"/org/model/resolve/{COMMIT}/sub/model.safetensors",
            "org/model",
            COMMIT,
            "sub/model.safetensors",
        ),
    ],
)
def test_resolve_paths_parse(raw: str, repo: str, revision: str, path: str) -> None:
    target = paths.parse(raw)
    assert isinstance(target, paths.FileTarget)
    assert (target.repo.id, target.revision, target.path) == (repo, revision, path)
    assert target.url_path() == raw


def test_api_paths_parse() -> None:
    target = paths.parse("/api/models/org/model/revision/refs%2Fpr%2F1")
    assert isinstance(target, paths.ApiTarget)
    assert (target.repo.id, target.action, target.revision) == (
        "org/model",
        "revision",
        "refs/pr/1",
    )
    assert target.url_path() == "/api/models/org/model/revision/refs%2Fpr%2F1"
    tree = paths.parse(f"/api/datasets/org/data/tree/{COMMIT}/sub/dir")
    assert isinstance(tree, paths.ApiTarget)
    assert (tree.repo.type, tree.action, tree.path) == ("datasets", "tree", "sub/dir")
    legacy = paths.parse("/api/models/gpt2/revision/main")
    assert isinstance(legacy, paths.ApiTarget)
    assert legacy.repo.id == "gpt2"
    assert isinstance(paths.parse("/api/whoami-v2"), paths.OtherTarget)


@pytest.mark.parametrize(
    "raw",
    [
        "/org/model/resolve/main/../x",
        "/org/model/resolve/main/%2E%2E/x",
        "/org/model/resolve/main/a%2Fb",
        "/org/model/resolve/main/a\\b",
        "/org/model/resolve/refs%2F..%2Fx/a",
        "/org/mo--del/resolve/main/a",
        "/-org/model/resolve/main/a",
        "relative/path",
        "/org/model/resolve/main",
    ],
)
def test_bad_paths_are_refused(raw: str) -> None:
    with pytest.raises(paths.BadPathError):
        paths.parse(raw)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-0", ByteRange(0, 0)),
        ("bytes=10-", ByteRange(10, 99)),
        ("bytes=0-100", ByteRange(0, 99)),  # one past the end: clamped (hf_transfer)
        ("bytes=-10", ByteRange(90, 99)),
        ("bytes=-1000", ByteRange(0, 99)),
        ("bytes=5-2", None),  # invalid: ignored
        ("bytes=0-1,5-6", None),  # several ranges: the whole file
        ("items=0-1", None),
    ],
)
def test_ranges(header: str | None, expected: ByteRange | None) -> None:
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize(
    ("header", "size"), [("bytes=100-", 100), ("bytes=-0", 100), ("bytes=0-0", 0)]
)
def test_unsatisfiable_ranges(header: str, size: int) -> None:
    with pytest.raises(UnsatisfiableRangeError):
        parse_range(header, size)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1024", 1024),
        ("10K", 10_000),
        ("10Ki", 10_240),
        ("1.5Gi", 1_610_612_736),
        ("2TB", 2 * 10**12),
        ("500Mi", 500 << 20),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "ten", "5Xi", "-1G", "i"])
def test_bad_sizes_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="500Gi"):
        parse_size(text)


def test_blob_keys_come_from_etags_and_verify_git_blobs() -> None:
    sha256 = hashlib.sha256(b"x").hexdigest()
    assert BlobKey.from_etag(f'W/"{sha256}"') == BlobKey("sha256", sha256)
    content = b"hello\n"
    git = BlobKey.from_etag('"ce013625030ba8dba906f756967f9e9ca394464a"')  # `git hash-object` of it
    assert git is not None
    assert git.algorithm == "gitsha1"
    hasher = git.hasher(len(content))
    hasher.update(content)
    assert hasher.hexdigest() == git.digest
    assert BlobKey.from_etag('"not-a-hash"') is None


def test_xet_signals_are_removed_and_links_moved_onto_the_cache() -> None:
    link = (
        '<https://hub/api/models/o/m/xet-read-token/abc>; rel="xet-auth", '
        '<https://cas/reconstruction/x>; rel="xet-reconstruction-info", '
        '<https://hub/api/models/o/m/tree/abc?cursor=2&recursive=true>; rel="next"'
    )
    assert rewrite_links(link, "http://cache:8090") == (
        '<http://cache:8090/api/models/o/m/tree/abc?cursor=2&recursive=true>; rel="next"'
    )
    assert rewrite_links('<https://hub/x>; rel="xet-auth"', "http://c") is None
    assert next_link(link) == "/api/models/o/m/tree/abc?cursor=2&recursive=true"
    tree = b'[{"path": "a", "xetHash": "h", "lfs": {"oid": "o", "xetHash": "h"}}]'
    assert clean_json(tree) == (
        [{"path": "a", "lfs": {"oid": "o"}}],
        b'[{"path": "a", "lfs": {"oid": "o"}}]',
    )
    assert clean_json(b"[" * 100_000 + b"]" * 100_000) is None, "too deep to be sane"
    assert clean_json(b"not json") is None


def test_rendezvous_moves_only_the_blobs_a_dead_peer_owned() -> None:
    peers = [f"10.0.0.{index}:8090" for index in range(1, 6)]
    keys = [f"sha256:{index:064x}" for index in range(400)]
    before = {key: rendezvous(key, peers)[0] for key in keys}
    owners = set(before.values())
    assert owners == set(peers), "every peer should own some of 400 blobs"
    dead = peers[2]
    after = {key: rendezvous(key, [peer for peer in peers if peer != dead])[0] for key in keys}
    moved = {key for key in keys if before[key] != after[key]}
    assert moved == {key for key in keys if before[key] == dead}
    assert all(after[key] == rendezvous(key, peers)[1] for key in moved), (
        "a dead owner's heir is next in line"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--upstream", "ftp://hub"], "is not an http(s) URL"),
        (["--port", "70000"], "is not a TCP port"),
        (["--peer", "nohostport"], "is not HOST:PORT"),
        (["--max-store-size", "lots"], "500Gi"),
        (["--auth-ttl", "-1"], "is negative"),
        (["--upstream-timeout", "0"], "is not positive"),
        (["--client-timeout", "-5"], "is not positive"),
        (["--max-connections", "0"], "is below 1"),
        (["--store", "/proc/version/store"], "cannot be created"),
    ],
)
def test_bad_flags_are_refused_with_the_fix(tmp_path: Path, flags: list[str], message: str) -> None:
    command = [
        sys.executable,
        "-m",
        "multinode_llm",
        "cache",
        "serve",
        "--store",
        str(tmp_path / "s"),
        *flags,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr


# Root may write anywhere: for root the store is made read-only in a private mount namespace.
READ_ONLY_STORE = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("unshare") is None,
    reason="as root, an unwritable store needs a read-only mount: unshare(1) is missing",
)
def test_a_store_the_uid_cannot_write_is_refused_naming_the_owner_it_needs(tmp_path: Path) -> None:
    # As the chart's hostPath store is when the node's directory belongs to another user.
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o555)
    prefix = ["unshare", "--mount", "sh", "-c", READ_ONLY_STORE, str(store)]
    command = [sys.executable, "-m", "multinode_llm", "cache", "serve", "--store", str(store)]
    if os.geteuid() == 0:
        command = prefix + command
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    uid = os.geteuid()
    assert result.returncode == 2, result.stderr
    assert f"is not writable by uid {uid}" in result.stderr, result.stderr
    assert f"a hostPath must be owned by uid {uid}" in result.stderr, result.stderr
