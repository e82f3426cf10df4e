"""`multinode-llm stage` with the real huggingface_hub against the fake Hub (the real Hub cannot be
reached here): a snapshot is either complete and verified, or not marked staged at all.

The problem it answers: huggingface_hub's ``snapshot_download`` returns success on a partial folder
when the Hub answers 429/5xx or times out, so a retried Job could complete on half a model; an
unpinned revision re-resolved on every upgrade changed the weights under a running group; and an
expired token failed upgrades that staged nothing new.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from multinode_llm.staging import layout
from multinode_llm_testing.cache import assert_same_files, hf_env, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

TOKEN = "hf_stage"


def stage(
    hub: FakeHub, root: Path, uri: str, *flags: str, token: str | None = TOKEN
) -> subprocess.CompletedProcess[str]:
    """The real command, as the download Job runs it: the token from a file, the Hub from
    HF_ENDPOINT, a scratch HOME of its own."""
    scratch = root.parent / f".scratch-{root.name}"
    scratch.mkdir(parents=True, exist_ok=True)
    env = hf_env(hub.url, scratch / "hf-home", token=None)
    env["HF_HUB_DISABLE_XET"] = "1"
    if token:
        token_file = scratch / "token"
        token_file.write_text(token)
        env["HF_TOKEN_PATH"] = str(token_file)
    argv = [sys.executable, "-m", "multinode_llm", "stage", uri, "--into", str(root), *flags]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def repo(fake_hub: FakeHub) -> FakeRepo:
    files = model_files(seed=7, shard_size=1 << 20)
    return fake_hub.add(FakeRepo("org/model", files, gated=True, readers={TOKEN}))


def test_a_revision_is_staged_under_its_commit_and_verified(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume" / "models" / "org" / "model"
    result = stage(fake_hub, root, "hf://org/model")
    assert result.returncode == 0, result.stderr
    assert layout.read_ref(root, "main") == repo.commit
    snapshot = layout.staged_model(root, "main")
    assert snapshot == root / "snapshots" / repo.commit
    assert_same_files(snapshot, repo.files)
    manifest = json.loads((snapshot / layout.MANIFEST).read_text())
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        path: len(content) for path, content in repo.files.items()
    }
    assert all(f["sha256"] or f["git_sha1"] for f in manifest["files"])


def test_a_staged_revision_needs_no_hub_not_even_a_token(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume"
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    fake_hub.reset_counts()
    fake_hub.outage = True
    again = stage(fake_hub, root, "hf://org/model", token="hf_expired")
    assert again.returncode == 0, again.stderr
    assert "nothing to download" in again.stderr
    assert fake_hub.requests_seen == []


def test_a_download_that_stays_broken_is_never_marked_staged(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    """Every try of one shard is cut: the Job fails naming it, and no group would start on it."""
    root = tmp_path / "volume"
    fake_hub.fault("model-00002-of-00002.safetensors", "cut")
    result = stage(fake_hub, root, "hf://org/model", "--attempts", "2")
    assert result.returncode == 1
    assert "model-00002-of-00002.safetensors" in result.stderr
    assert "the group will not start on this snapshot" in result.stderr
    assert layout.read_ref(root, "main") is None
    with pytest.raises(layout.NotStagedError, match="does not exist"):
        layout.staged_model(root, "main")
    fake_hub.clear_faults()
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    assert_same_files(layout.staged_model(root, "main"), repo.files)


def test_a_download_cut_a_few_times_completes_and_only_whole_files_count(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume"
    fake_hub.fault("model-00001-of-00002.safetensors", "cut", times=2)
    fake_hub.fault("config.json", "corrupt", times=1)
    result = stage(fake_hub, root, "hf://org/model")
    assert result.returncode == 0, result.stderr
    assert_same_files(layout.staged_model(root, "main"), repo.files)


def test_hub_errors_during_the_download_never_leave_a_partial_snapshot_marked_whole(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    """Half the files are there from an earlier try and the Hub then answers only with errors:
    snapshot_download may call that a success; the snapshot is checked file by file instead."""
    root = tmp_path / "volume"
    snapshot = layout.snapshot_dir(root, repo.commit)
    for path in ("config.json", "model-00001-of-00002.safetensors"):
        (snapshot / path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / path).write_bytes(repo.files[path])
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(repo.commit)  # a ref from an older, broken stager
    fake_hub.outage = True
    result = stage(fake_hub, root, "hf://org/model", "--attempts", "2")
    assert result.returncode != 0
    with pytest.raises(layout.NotStagedError, match="no manifest"):
        layout.staged_model(root, "main")
    fake_hub.outage = False
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    assert_same_files(layout.staged_model(root, "main"), repo.files)


def test_a_branch_is_resolved_once_and_a_rollback_finds_its_commit(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume"
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    first = repo.commit
    repo.files = {**repo.files, "config.json": b'{"model_type": "llama", "v": 2}'}
    second = repo.commit
    assert second != first
    fake_hub.reset_counts()
    again = stage(fake_hub, root, "hf://org/model")  # main moved upstream: the ref stays
    assert again.returncode == 0
    assert layout.read_ref(root, "main") == first
    assert fake_hub.requests_seen == []
    upgrade = stage(fake_hub, root, f"hf://org/model:{second}")  # the user names the new commit
    assert upgrade.returncode == 0, upgrade.stderr
    assert_same_files(layout.staged_model(root, second), repo.files)
    fake_hub.outage = True  # rollback to the old values: the old snapshot is still there
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    assert layout.staged_model(root, "main") == layout.snapshot_dir(root, first)


def test_a_model_an_older_release_left_flat_is_adopted_and_only_a_bad_file_downloaded(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    """The chart's releases before this layout had KServe's storage initializer write the
    revision's files flat into ROOT/REVISION/. A move from one links each file that matches the
    commit (size and hash) into the snapshot, taking no second copy, and fetches the rest."""
    root = tmp_path / "volume" / "models" / "org" / "model"
    legacy = root / "main"
    for path, content in repo.files.items():
        (legacy / path).parent.mkdir(parents=True, exist_ok=True)
        (legacy / path).write_bytes(content)
    bad = "model-00002-of-00002.safetensors"
    spoiled = bytearray(repo.files[bad])
    spoiled[len(spoiled) // 2] ^= 0xFF
    (legacy / bad).write_bytes(bytes(spoiled))
    fake_hub.reset_counts()
    result = stage(fake_hub, root, "hf://org/model")
    assert result.returncode == 0, result.stderr
    snapshot = layout.staged_model(root, "main")
    assert_same_files(snapshot, repo.files)
    good = "model-00001-of-00002.safetensors"
    assert (snapshot / good).stat().st_ino == (legacy / good).stat().st_ino
    assert (snapshot / bad).stat().st_ino != (legacy / bad).stat().st_ino
    assert fake_hub.blob_bytes[bad] == len(repo.files[bad])
    assert fake_hub.blob_bytes[good] == 0, "a file the volume held whole was downloaded again"
    assert "adopted 6 files an older release staged" in result.stderr


def test_a_file_removed_from_a_staged_snapshot_is_named_at_the_head(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume"
    assert stage(fake_hub, root, "hf://org/model").returncode == 0
    (layout.snapshot_dir(root, repo.commit) / "model-00002-of-00002.safetensors").unlink()
    missing = r"model-00002-of-00002\.safetensors is missing"
    with pytest.raises(layout.NotStagedError, match=missing):
        layout.staged_model(root, "main")


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("hf://org", "is not hf://ORG/NAME[:REVISION]"),
        ("hf://org/model:refs/pr/1", "may not hold '/'"),
        ("s3://bucket/model", "is not hf://ORG/NAME[:REVISION]"),
    ],
)
def test_a_bad_uri_is_one_line_naming_it(tmp_path: Path, uri: str, says: str) -> None:
    hub = FakeHub()  # never started: nothing may be asked
    result = stage(hub, tmp_path / "volume", uri)
    assert result.returncode == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def test_a_gated_repo_without_its_token_fails_at_once_saying_so(
    fake_hub: FakeHub, repo: FakeRepo, tmp_path: Path
) -> None:
    """The Hub shows a gated repo's listing to anyone but its files only to readers: no retry
    makes a missing token right."""
    result = stage(fake_hub, tmp_path / "volume", "hf://org/model", token=None)
    assert result.returncode == 1
    assert "the Hub refuses this token for org/model" in result.stderr
    assert "model.hfTokenSecret" in result.stderr
    assert "Traceback" not in result.stderr
    assert "attempt 1" not in result.stderr  # it did not go on trying
