"""The storage code of EACH supported KServe release (charts/multinode-llm/kserve-releases.yaml),
with the huggingface_hub (and hf-xet) its image locks, against the fake Hub.

A release whose storage code and pins equal an earlier one's (0.15.2 = 0.15.1, 0.17.1 = 0.17.0,
0.18.1 = 0.18.0 today; multinode_llm_testing.storage_sites compares the files byte for byte) is
not run twice: its tests skip, naming the release that ran them. test_storage_initializer.py tests
the newest client (0.21.0) through the cache.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from multinode_llm_testing.cache import assert_same_files, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.job_pod import initializer_env, model_files_in
from multinode_llm_testing.storage_sites import Release, Site, releases

RELEASES = releases()
TIMEOUT = 180
# huggingface_hub releases whose snapshot_download fails when it cannot write
# $HF_HOME/hub/models--ORG--NAME/refs/<branch> (0.26.5: _snapshot_download.py, no try around the
# write; 0.30.2 and 0.32.4 log "Ignored error while writing commit hash" and go on).
HUB_NEEDS_WRITABLE_HF_HOME = frozenset({"0.26.5"})


def by_version(release: Release) -> str:
    return release.version


def site_once(storage_sites: dict[str, Site], release: Release) -> Site:
    """The release's site, skipping when an earlier release runs the very same thing."""
    site = storage_sites[release.version]
    if site.same_as:
        pytest.skip(
            f"KServe {release.version} runs the same storage code with the same pins as "
            f"{site.same_as} (sha256 {site.identity[:12]}): tested as {site.same_as}"
        )
    return site


def initialize(
    site: Site, source: str, destination: Path, env: dict[str, str], prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), *site.command(source, str(destination))],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_each_release_runs_its_own_code_with_the_libraries_its_image_locks(
    storage_sites: dict[str, Site], release: Release
) -> None:
    site = storage_sites[release.version]
    [code] = importlib.metadata.distributions(path=[str(site.code)])
    assert f"{code.metadata['Name']}=={code.version}".lower() == release.package.lower()
    if release.distribution == "kserve":
        # The storage code and what it imports; none of the model server (its __init__ is not run).
        assert set(site.files) == {
            "kserve/__init__.py",
            "kserve/constants/__init__.py",
            "kserve/constants/constants.py",
            "kserve/logging.py",
            "kserve/storage/__init__.py",
            "kserve/storage/storage.py",
        }
    else:
        assert "kserve_storage/kserve_storage.py" in site.files, site.files
    assert site.versions["huggingface_hub"] == release.huggingface_hub
    # hf-xet decides whether huggingface_hub 0.30+ tries Xet: absent where the image has none.
    assert site.versions["hf_xet"] == release.hf_xet


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_a_revision_with_a_slash_is_refused_before_the_hub_is_asked(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    """hf://ORG/NAME:REV is split on '/' into exactly two parts first: refs/pr/1 makes four, which
    every release refuses (the fake Hub would serve that branch)."""
    site = site_once(storage_sites, release)
    files = model_files(seed=50, shard_size=1 << 20)
    repo = fake_hub.add(FakeRepo("org/model", files))
    env = initializer_env(site, fake_hub.url, tmp_path / "tmp")

    refused = initialize(site, "hf://org/model:refs/pr/1", tmp_path / "pr", env)
    assert refused.returncode != 0, refused.stderr[-3000:]
    assert (
        "exactly one '/'" in refused.stderr or "Invalid Hugging Face URI format" in refused.stderr
    ), refused.stderr[-3000:]
    assert sum(fake_hub.requests.values()) == 0, fake_hub.requests
    assert model_files_in(tmp_path / "pr") == []

    pinned = initialize(site, f"hf://org/model:{repo.commit}", tmp_path / "commit", env)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    assert_same_files(tmp_path / "commit", files)


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_hf_token_path_opens_a_gated_repo_and_a_wrong_token_gets_nothing(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    """The chart mounts the token Secret as a file and sets HF_TOKEN_PATH: no release passes a
    token itself, huggingface_hub reads that file."""
    site = site_once(storage_sites, release)
    files = model_files(seed=51, shard_size=1 << 20)
    fake_hub.add(FakeRepo("org/gated", files, gated=True, readers={"hf_reader"}))
    for name, token in (("right", "hf_reader"), ("wrong", "hf_stranger")):
        (tmp_path / name).write_text(token + "\n")

    env = initializer_env(site, fake_hub.url, tmp_path / "tmp1")
    wrong = initialize(
        site,
        "hf://org/gated",
        tmp_path / "denied",
        env | {"HF_TOKEN_PATH": str(tmp_path / "wrong")},
    )
    assert wrong.returncode != 0
    assert model_files_in(tmp_path / "denied") == []

    env = initializer_env(site, fake_hub.url, tmp_path / "tmp2")
    right = initialize(
        site,
        "hf://org/gated",
        tmp_path / "staged",
        env | {"HF_TOKEN_PATH": str(tmp_path / "right")},
    )
    assert right.returncode == 0, right.stderr[-3000:]
    assert_same_files(tmp_path / "staged", files)


def read_only_mount_prefix(directory: Path) -> list[str]:
    """A command prefix that runs the rest with a read-only tmpfs on ``directory`` (a mount
    namespace of its own: nothing changes outside the process)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    # root may make a mount namespace; others need a user namespace of their own as well
    prefix = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--mount", "-r"]
    script = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    probe = subprocess.run(
        [*prefix, "sh", "-c", script, str(directory), "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs in a mount namespace: {probe.stderr.strip()}")
    return [*prefix, "sh", "-c", script, str(directory)]


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_a_read_only_hf_home_fails_only_with_huggingface_hub_0_26(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    """huggingface_hub writes $HF_HOME/hub/.../refs/main even with local_dir; 0.26.5 (KServe 0.15.0)
    fails on a read-only HF_HOME, which is where it would be on the Job's read-only root filesystem
    without the chart's HF_HOME on the /tmp emptyDir (test_chart_download_job.py checks that)."""
    site = site_once(storage_sites, release)
    files = model_files(seed=52, shard_size=1 << 20)
    fake_hub.add(FakeRepo("org/model", files))
    hf_home = tmp_path / "read-only-hf-home"
    hf_home.mkdir()
    env = initializer_env(site, fake_hub.url, tmp_path / "tmp") | {"HF_HOME": str(hf_home)}

    result = initialize(
        site, "hf://org/model", tmp_path / "out", env, read_only_mount_prefix(hf_home)
    )
    if release.huggingface_hub in HUB_NEEDS_WRITABLE_HF_HOME:
        assert result.returncode != 0, "a read-only HF_HOME did not fail huggingface_hub 0.26"
        assert "Read-only file system" in result.stderr, result.stderr[-3000:]
    else:
        assert result.returncode == 0, result.stderr[-3000:]
        assert_same_files(tmp_path / "out", files)
