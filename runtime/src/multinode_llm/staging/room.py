"""Whether a commit fits on the claim, known before its first byte is written.

The Hub lists every file of a commit with its size, so staging knows what it will write; without
this check a model bigger than its volume (a 405B model on the chart's default 100Gi) downloads
until the disk is full, hours later, and leaves the volume full. What is already there counts: a
file of the commit whole on the volume is not written again, and huggingface_hub resumes a
partial download (``.cache/huggingface/download/*.incomplete``) where it stopped.

Standard library only.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from multinode_llm.errors import UserError
from multinode_llm.staging.layout import FileEntry

log = logging.getLogger("multinode_llm.stage")
# A file takes whole blocks, and huggingface_hub writes a small metadata file beside each; 64 KiB
# per file covers both on the filesystems claims use (4 KiB blocks, NFS's 64 KiB at most).
PER_FILE_SLACK = 64 * 1024
GIB = 1 << 30
PARTIAL_DOWNLOADS = Path(".cache") / "huggingface" / "download"


class NoRoomError(UserError):
    """The commit does not fit in the free space of the claim; the message names the size."""


@dataclass(frozen=True)
class Room:
    """The commit's bytes against the claim's space, in bytes."""

    total: int  # every file of the commit
    staged: int  # of those, on the volume already (whole files, partial downloads)
    free: int  # free on the claim's filesystem
    capacity: int  # the claim's filesystem in all
    slack: int  # blocks and metadata beyond the files' bytes

    @property
    def needed(self) -> int:
        return self.total - self.staged + self.slack

    @property
    def fits(self) -> bool:
        return self.needed <= self.free

    @property
    def size_to_ask(self) -> int:
        """The smallest claim size, in whole GiB, that holds what is there now and the rest."""
        used = self.capacity - self.free
        return math.ceil((used + self.needed) / GIB)


def measure(snapshot: Path, files: tuple[FileEntry, ...]) -> Room | None:
    """The room ``files`` need under ``snapshot`` and the claim has; None where the filesystem
    cannot say (staging then goes on, as it did before the check)."""
    try:
        usage = shutil.disk_usage(_existing(snapshot))
    except OSError as error:
        log.warning("cannot read the free space under %s (%s): not checked", snapshot, error)
        return None
    total = sum(entry.size for entry in files)
    staged = min(total, _whole_bytes(snapshot, files) + _partial_bytes(snapshot))
    return Room(total, staged, usage.free, usage.total, PER_FILE_SLACK * len(files))


def check(snapshot: Path, files: tuple[FileEntry, ...], what: str) -> None:
    """Raise ``NoRoomError`` when ``files`` cannot fit under ``snapshot``; ``what`` names the
    model (repo@revision = commit) in the message."""
    room = measure(snapshot, files)
    if room is None:
        return
    if not room.fits:
        raise NoRoomError(
            f"{what} needs {_size(room.needed)} more on the model's volume ({_size(room.total)} "
            f"in all, {_size(room.staged)} of it staged already) and the volume has "
            f"{_size(room.free)} free of {_size(room.capacity)} at {_existing(snapshot)}: "
            f"set model.storage.size to at least {room.size_to_ask}Gi (with "
            "model.storage.existingClaim, grow that claim to it), then run the download Job again"
        )
    log.info(
        "room: %s needs %s more, the volume has %s free of %s",
        what,
        _size(room.needed),
        _size(room.free),
        _size(room.capacity),
    )


def _whole_bytes(snapshot: Path, files: tuple[FileEntry, ...]) -> int:
    """Bytes of the files already there at their size (a file of another size is rewritten)."""
    found = 0
    for entry in files:
        try:
            if (snapshot / entry.path).stat().st_size == entry.size:
                found += entry.size
        except OSError:
            continue
    return found


def _partial_bytes(snapshot: Path) -> int:
    """Bytes of huggingface_hub's partial downloads, which it resumes rather than rewrites."""
    folder = snapshot / PARTIAL_DOWNLOADS
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*.incomplete") if p.is_file())


def _existing(path: Path) -> Path:
    """``path`` or its nearest folder that exists (a first staging has made none of it yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _size(count: int) -> str:
    for unit, factor in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}"
    return f"{count} B"
