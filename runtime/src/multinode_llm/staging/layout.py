"""How a Hugging Face model staged by ``multinode-llm stage`` lies on the shared volume.

    ROOT/refs/REVISION                      the commit REVISION was resolved to: written once, after
                                            that commit's snapshot was complete, never rewritten
    ROOT/snapshots/COMMIT/...               the commit's files, as the Hub lists them
    ROOT/snapshots/COMMIT/.multinode-llm/manifest.json
                                            written last: every file with its size and hash

A branch is resolved to a commit once and staged under that commit, so a later staging (an upgrade,
a sync) never changes the weights under a running group, and a rollback to an older revision finds
its snapshot still there. A snapshot without its manifest is incomplete, whatever files it holds.

Standard library only: the head checks the snapshot with it before it starts anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from multinode_llm.errors import UserError

MANIFEST = Path(".multinode-llm") / "manifest.json"
SCRATCH = (".multinode-llm", ".cache")  # our manifest, huggingface_hub's local_dir metadata
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHOWN = 5  # problems named in one message


class NotStagedError(UserError):
    """The snapshot a group would serve is missing or incomplete; the message says what to do."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit, as the Hub's tree lists it."""

    path: str
    size: int
    sha256: str = ""  # LFS files: the content's sha256
    git_sha1: str = ""  # other files: the git blob hash


@dataclass(frozen=True)
class Manifest:
    repo: str
    revision: str
    commit: str
    files: tuple[FileEntry, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        files = tuple(FileEntry(**entry) for entry in data.pop("files"))
        return cls(files=files, **data)


def ref_file(root: Path, revision: str) -> Path:
    return root / "refs" / revision


def snapshot_dir(root: Path, commit: str) -> Path:
    return root / "snapshots" / commit


def read_ref(root: Path, revision: str) -> str | None:
    """The commit ``revision`` was staged as, or None when it never was."""
    try:
        commit = ref_file(root, revision).read_text().strip()
    except OSError:
        return None
    return commit if COMMIT.match(commit) else None


def load_manifest(snapshot: Path) -> Manifest | None:
    try:
        return Manifest.from_json((snapshot / MANIFEST).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def defects(
    snapshot: Path, files: tuple[FileEntry, ...], hashes: bool
) -> list[tuple[FileEntry, str]]:
    """Each file that keeps ``snapshot`` from being these files, with why: missing, of another
    size or (with ``hashes``) of other content. Empty when the snapshot is whole."""
    found = []
    for entry in files:
        path = snapshot / entry.path
        try:
            size = path.stat().st_size
        except OSError:
            found.append((entry, f"{entry.path} is missing"))
            continue
        if size != entry.size:
            found.append((entry, f"{entry.path} has {size} bytes, the commit's file {entry.size}"))
        elif hashes and not _same_content(path, entry):
            found.append((entry, f"{entry.path} differs from the commit's file (hash)"))
    return found


def problems(snapshot: Path, files: tuple[FileEntry, ...], hashes: bool) -> list[str]:
    """``defects`` as sentences."""
    return [why for _, why in defects(snapshot, files, hashes)]


def staged_model(root: Path, revision: str) -> Path:
    """The complete snapshot ``revision`` names under ``root``, or ``NotStagedError`` saying why.

    Sizes are checked against the manifest (cheap: a 100 GB model is not hashed at every start;
    ``multinode-llm stage`` hashed every file before it wrote the manifest).
    """
    commit = read_ref(root, revision)
    if commit is None:
        raise NotStagedError(
            f"the model is not staged: {ref_file(root, revision)} does not exist (the download "
            "Job writes it once the snapshot is complete): check the download Job's log"
        )
    snapshot = snapshot_dir(root, commit)
    manifest = load_manifest(snapshot)
    if manifest is None:
        raise NotStagedError(
            f"the snapshot {snapshot} has no manifest ({MANIFEST}): it is incomplete; run the "
            "download Job again (helm upgrade, or an Argo CD sync)"
        )
    missing = problems(snapshot, manifest.files, hashes=False)
    if missing:
        raise NotStagedError(
            f"the snapshot {snapshot} of {manifest.repo}@{commit} is incomplete: "
            f"{_summary(missing)}; run the download Job again (helm upgrade, or an Argo CD sync)"
        )
    return snapshot


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a part (a rename on one volume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _summary(found: list[str]) -> str:
    shown = "; ".join(found[:_SHOWN])
    more = len(found) - _SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def _same_content(path: Path, entry: FileEntry) -> bool:
    if entry.sha256:
        digest = hashlib.sha256()
        expected = entry.sha256
    else:
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % entry.size)
        expected = entry.git_sha1
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == expected
