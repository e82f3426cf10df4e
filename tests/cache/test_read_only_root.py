"""The cache writes nowhere but its store: it serves with the root filesystem mounted read-only,
as the chart runs it (readOnlyRootFilesystem), with only the store volume writable."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import snapshot_download
from multinode_llm_testing.cache import CacheProcess, assert_same_files, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

# In a private mount namespace: keep the store writable (a bind mount of its own), then make "/"
# read-only, then become the cache.
READ_ONLY_ROOT = (
    'mount --make-rprivate / && mount --bind "$0" "$0" && mount -o remount,bind,ro / && exec "$@"'
)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a read-only root in a mount namespace needs root and unshare(1)",
)
def test_the_cache_serves_with_a_read_only_root_filesystem(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=50)
    fake_hub.add(FakeRepo("org/ro", files))
    store = tmp_path / "store"
    store.mkdir()
    prefix = ["unshare", "--mount", "sh", "-c", READ_ONLY_ROOT, str(store)]
    cache = start_cache(store=store, prefix=prefix)

    got = snapshot_download("org/ro", endpoint=cache.url, cache_dir=tmp_path / "client")
    assert_same_files(Path(got), files)
    assert cache.metrics()["store_blobs"] == len(files)
    assert "Read-only file system" not in cache.log_path.read_text()
