"""KServe's storage initializer (``kserve-storage`` with the huggingface_hub, hf-xet and hf_transfer
its image pins) downloading ``hf://org/model`` through the cache, as an InferenceService's init
container does.

The wheel has no command for it: the image runs ``initializer-entrypoint SRC DEST``, a script that
calls ``Storage.download_files(srcs, dests)``; INITIALIZER below does the same. KServe sets
``HF_HUB_ENABLE_HF_TRANSFER=1`` on that container, so big files arrive as one abandoned plain GET, a
``bytes=0-0`` probe and parallel 10 MiB Range GETs.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest
from multinode_llm_testing.cache import CacheProcess, assert_same_files, hf_env, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

kserve_storage = pytest.importorskip(
    "kserve_storage", reason="kserve-storage is installed by `tox -e storage`"
)

INITIALIZER = (
    "import sys; from kserve_storage import Storage; "
    "Storage.download_files(sys.argv[1::2], sys.argv[2::2])"
)
SHARD_SIZE = 60 << 20  # above 5 x 10 MiB: huggingface_hub 0.32 hands such files to hf_transfer


def run_initializer(
    uri: str, destination: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", INITIALIZER, uri, str(destination)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_pinned_client_versions_are_the_ones_kserve_ships() -> None:
    assert (version("huggingface_hub"), version("hf_xet"), version("hf_transfer")) == (
        "0.32.4",
        "1.5.1",
        "0.1.9",
    )


@pytest.mark.parametrize("revision", ["", "commit"])
def test_storage_initializer_downloads_hf_uri_byte_identically(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path, revision: str
) -> None:
    files = model_files(seed=40, shard_size=SHARD_SIZE)
    repo = fake_hub.add(FakeRepo("org/model", files, gated=True, readers={"hf_kserve"}))
    cache = start_cache()
    env = hf_env(cache.url, tmp_path / "home", token="hf_kserve")
    env["HF_HUB_ENABLE_HF_TRANSFER"] = "1"
    uri = f"hf://org/model:{repo.commit}" if revision else "hf://org/model"

    result = run_initializer(uri, tmp_path / "mnt" / "models", env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_files(tmp_path / "mnt" / "models", files)
    metrics = cache.metrics()
    assert metrics["range_requests_total"] >= 5, "hf_transfer's parallel Range GETs did not happen"
    assert fake_hub.blob_gets.total() == len(files), "each file should reach upstream exactly once"
    assert fake_hub.client_requests == 0, "the client went around the cache"
    assert fake_hub.auth_at_cdn == 0, "the token reached the CDN"

    fake_hub.reset_counts()
    warm = run_initializer(
        uri,
        tmp_path / "again",
        hf_env(cache.url, tmp_path / "home2", token="hf_kserve")
        | {"HF_HUB_ENABLE_HF_TRANSFER": "1"},
    )
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert_same_files(tmp_path / "again", files)
    assert fake_hub.blob_gets.total() == 0, "a warm download fetched blobs upstream"


def test_storage_initializer_without_access_fails_and_gets_nothing(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess], tmp_path: Path
) -> None:
    files = model_files(seed=41)
    fake_hub.add(FakeRepo("org/model", files, gated=True, readers={"hf_kserve"}))
    cache = start_cache()
    run_initializer(
        "hf://org/model",
        tmp_path / "warm",
        hf_env(cache.url, tmp_path / "h1", token="hf_kserve"),
    )
    result = run_initializer(
        "hf://org/model",
        tmp_path / "denied",
        hf_env(cache.url, tmp_path / "h2", token="hf_other"),
    )
    assert result.returncode != 0
    assert not list((tmp_path / "denied").rglob("*.safetensors"))
