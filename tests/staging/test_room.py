"""`multinode-llm stage` checks the volume's free space before its first byte: a commit that does
not fit fails at once, naming `model.storage.size` and the size it needs, and what is on the volume
already counts.

The volume is a small tmpfs, mounted in a mount namespace of its own (``unshare --mount
--map-root-user``: no root needed where user namespaces are allowed) around the real command, with
the real huggingface_hub, against the fake Hub.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from multinode_llm_testing.cache import hf_env, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo

TOKEN = "hf_room"
MIB = 1 << 20
# Runs inside the namespace: mounts the tmpfs, runs each step (argv lists) and writes their exit
# codes, their stderr and the volume's files to the result file (outside the tmpfs).
INSIDE = """
import json, os, subprocess, sys
volume, size, result, steps = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
os.makedirs(volume, exist_ok=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", volume], check=True)
runs = [subprocess.run(step, capture_output=True, text=True) for step in steps]
files = sorted(
    os.path.relpath(os.path.join(top, name), volume)
    for top, _, names in os.walk(volume) for name in names
)
with open(result, "w") as out:
    json.dump({"runs": [[r.returncode, r.stderr] for r in runs], "files": files}, out)
"""


@pytest.fixture(scope="module")
def namespaces() -> None:
    unshare = shutil.which("unshare")
    probe = [unshare or "unshare", "--mount", "--map-root-user", "true"]
    if unshare is None or subprocess.run(probe, capture_output=True, check=False).returncode:
        pytest.skip("cannot make a mount namespace here (unshare --mount --map-root-user)")


def stage_argv(root: Path, uri: str = "hf://org/big") -> list[str]:
    return [sys.executable, "-m", "multinode_llm", "stage", uri, "--into", str(root)]


def on_small_volume(
    tmp_path: Path, hub: FakeHub, size: str, steps: list[list[str]]
) -> dict[str, Any]:
    """Each step run in turn with a tmpfs of ``size`` at tmp_path/volume, as the download Job
    runs: the token from a file, the Hub from HF_ENDPOINT."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "token").write_text(TOKEN)
    env = hf_env(hub.url, scratch / "hf-home", token=None)
    env["HF_HUB_DISABLE_XET"] = "1"
    env["HF_TOKEN_PATH"] = str(scratch / "token")
    result = tmp_path / "result.json"
    argv = ["unshare", "--mount", "--map-root-user", sys.executable, "-c", INSIDE]
    argv += [str(tmp_path / "volume"), size, str(result), json.dumps(steps)]
    subprocess.run(argv, env=env, check=True, timeout=300)
    found: dict[str, Any] = json.loads(result.read_text())
    return found


@pytest.fixture
def big(fake_hub: FakeHub) -> FakeRepo:
    """About 6.1 MiB: two LFS shards of 4 and 2 MiB and small files."""
    files = model_files(seed=11, shard_size=4 * MIB)
    return fake_hub.add(FakeRepo("org/big", files, gated=True, readers={TOKEN}))


def test_a_model_bigger_than_the_volume_fails_before_its_first_byte(
    namespaces: None, fake_hub: FakeHub, big: FakeRepo, tmp_path: Path
) -> None:
    root = tmp_path / "volume" / "models" / "org" / "big"
    found = on_small_volume(tmp_path, fake_hub, "4m", [stage_argv(root)])
    [(code, stderr)] = found["runs"]
    assert code == 2, stderr
    slack = len(big.files) * 64 * 1024  # blocks and metadata, 64 KiB per file
    assert "set model.storage.size to at least 1Gi" in stderr, stderr
    assert f"needs {(big.size + slack) / MIB:.1f} MiB more on the model's volume" in stderr, stderr
    assert f"({big.size / MIB:.1f} MiB in all, 0 B of it staged already)" in stderr, stderr
    assert "4.0 MiB free of 4.0 MiB" in stderr, stderr
    assert sum(fake_hub.blob_bytes.values()) == 0, "a file was downloaded"
    assert found["files"] == []


def test_what_is_staged_already_counts_against_what_the_commit_needs(
    namespaces: None, fake_hub: FakeHub, big: FakeRepo, tmp_path: Path
) -> None:
    """A Job killed after its last file and before the manifest: the files are there, the rest
    (nothing) fits, and the second run completes the snapshot without downloading it again."""
    root = tmp_path / "volume" / "model"
    forget = ["sh", "-c", f'rm -r "{root}/refs" "{root}"/snapshots/*/.multinode-llm']
    found = on_small_volume(tmp_path, fake_hub, "10m", [stage_argv(root), forget, stage_argv(root)])
    [(first, first_err), (removed, _), (again, again_err)] = found["runs"]
    assert first == 0, first_err
    assert removed == 0
    assert again == 0, again_err
    slack = len(big.files) * 64 * 1024
    assert f"room: org/big@main ({big.commit}) needs {slack / 1024:.1f} KiB more" in again_err
    assert f"snapshots/{big.commit}/.multinode-llm/manifest.json" in [
        f.removeprefix("model/") for f in found["files"]
    ]
    assert fake_hub.blob_bytes["model-00001-of-00002.safetensors"] == 4 * MIB  # fetched once
