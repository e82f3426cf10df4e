"""The staged model's layout on the volume, and the head's wait for it (staging/layout.py)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest
from multinode_llm.config import head_config
from multinode_llm.group.head import HeadSupervisor
from multinode_llm.group.supervisor import GroupError
from multinode_llm.staging import layout

COMMIT = "a" * 40
FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"\0" * 4096}


def entries() -> tuple[layout.FileEntry, ...]:
    found = []
    for path, content in FILES.items():
        if path.endswith(".safetensors"):
            found.append(
                layout.FileEntry(path, len(content), sha256=hashlib.sha256(content).hexdigest())
            )
        else:
            blob = b"blob %d\0" % len(content) + content
            sha1 = hashlib.sha1(blob, usedforsecurity=False).hexdigest()
            found.append(layout.FileEntry(path, len(content), git_sha1=sha1))
    return tuple(found)


def stage_by_hand(root: Path, files: dict[str, bytes] = FILES, manifest: bool = True) -> Path:
    snapshot = layout.snapshot_dir(root, COMMIT)
    for path, content in files.items():
        (snapshot / path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / path).write_bytes(content)
    if manifest:
        text = layout.Manifest("org/m", "main", COMMIT, entries()).to_json()
        layout.write_atomic(snapshot / layout.MANIFEST, text)
    layout.write_atomic(layout.ref_file(root, "main"), COMMIT + "\n")
    return snapshot


def test_a_whole_snapshot_is_what_the_revision_names(tmp_path: Path) -> None:
    snapshot = stage_by_hand(tmp_path)
    assert layout.staged_model(tmp_path, "main") == snapshot
    assert layout.problems(snapshot, entries(), hashes=True) == []
    manifest = layout.load_manifest(snapshot)
    assert manifest is not None
    assert manifest.files == entries()


def test_content_of_the_right_size_but_other_bytes_fails_the_hash_check(tmp_path: Path) -> None:
    snapshot = stage_by_hand(tmp_path, {**FILES, "model.safetensors": b"\1" * 4096})
    assert layout.problems(snapshot, entries(), hashes=False) == []
    assert layout.problems(snapshot, entries(), hashes=True) == [
        "model.safetensors differs from the commit's file (hash)"
    ]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("no ref", "refs/main does not exist"),
        ("no manifest", "has no manifest"),
        ("missing file", "model.safetensors is missing"),
        ("cut file", "model.safetensors has 10 bytes, the commit's file 4096"),
    ],
)
def test_an_incomplete_snapshot_is_named_with_what_lacks(
    tmp_path: Path, damage: str, says: str
) -> None:
    snapshot = stage_by_hand(tmp_path, manifest=damage != "no manifest")
    if damage == "no ref":
        layout.ref_file(tmp_path, "main").unlink()
    elif damage == "missing file":
        (snapshot / "model.safetensors").unlink()
    elif damage == "cut file":
        (snapshot / "model.safetensors").write_bytes(b"x" * 10)
    with pytest.raises(layout.NotStagedError, match=says):
        layout.staged_model(tmp_path, "main")


def head(root: Path) -> HeadSupervisor:
    env = {
        "PIPELINE_PARALLEL_SIZE": "2",
        "TENSOR_PARALLEL_SIZE": "1",
        "MODEL_DIR": str(root),
        "MODEL_REVISION": "main",
        "POD_IP": "127.0.0.1",
    }
    return HeadSupervisor(head_config(env, {}))  # its status port is never opened here


def test_the_head_waits_for_the_download_then_serves_the_snapshot(tmp_path: Path) -> None:
    supervisor = head(tmp_path)
    timer = threading.Timer(0.5, stage_by_hand, args=(tmp_path,))
    timer.start()
    try:
        snapshot = asyncio.run(asyncio.wait_for(supervisor._staged_model(), 30))
    finally:
        timer.cancel()
    assert snapshot == layout.snapshot_dir(tmp_path, COMMIT)
    assert supervisor.state.phase == "waiting for the model"


def test_the_head_refuses_a_staged_snapshot_that_lost_files(tmp_path: Path) -> None:
    snapshot = stage_by_hand(tmp_path)
    (snapshot / "config.json").unlink()
    with pytest.raises(GroupError, match=r"config\.json is missing"):
        asyncio.run(asyncio.wait_for(head(tmp_path)._staged_model(), 30))
