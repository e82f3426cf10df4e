"""``multinode-llm stage hf://ORG/NAME[:REVISION] --into ROOT``: the download Job's work.

It ends with a complete, verified snapshot on the volume, or fails naming what is missing:

1. A revision already staged (``refs/REVISION`` and a whole snapshot) needs nothing: the Hub is not
   asked, so an expired token or a Hub outage cannot fail an upgrade that changes no model.
2. Otherwise the revision is resolved to a commit once (a commit id is taken as it is), the commit's
   file list (sizes, hashes) is read from the Hub, its total size less what is on the volume
   already is checked against the volume's free space (``room.py``: a model that cannot fit fails
   at once, naming the ``model.storage.size`` it needs), and the files are downloaded with
   huggingface_hub into ``snapshots/COMMIT``. Before that, a file that the chart's older releases
   left whole on the volume is linked in instead (``_adopt``): their storage initializer wrote the
   revision's files flat into ``ROOT/REVISION/`` (or ``ROOT/`` with ``model.storage.path``), so a
   move from such a release would otherwise download the whole model again beside it.
3. Every file is checked against that list, sizes and hashes: ``snapshot_download`` returns success
   on a partial folder when the Hub answers 429/5xx or times out (huggingface_hub
   ``_snapshot_download.py``), so its answer is not trusted. Missing or wrong files are fetched
   again, a few times with back-off; if they stay missing the command exits 1 naming them.
4. Only then the manifest is written, and last ``refs/REVISION``: a group never starts on a part.

The token comes the way huggingface_hub reads it (``HF_TOKEN_PATH``, a mounted Secret file), and
the Hub the way it is configured (``HF_ENDPOINT``, e.g. the model cache); neither is logged.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multinode_llm.errors import UserError
from multinode_llm.staging import room
from multinode_llm.staging.layout import (
    COMMIT,
    FileEntry,
    Manifest,
    defects,
    load_manifest,
    problems,
    read_ref,
    ref_file,
    snapshot_dir,
    write_atomic,
)

log = logging.getLogger("multinode_llm.stage")
URI = re.compile(r"^hf://([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?::([^/\s]+))?$")
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class Source:
    repo: str
    revision: str

    @classmethod
    def parse(cls, uri: str) -> Source:
        match = URI.match(uri)
        if not match:
            raise UserError(
                f"{uri!r} is not hf://ORG/NAME[:REVISION]: write it like "
                "hf://Qwen/Qwen2.5-0.5B-Instruct or hf://Qwen/Qwen2.5-0.5B-Instruct:main "
                "(a revision may not hold '/')"
            )
        return cls(f"{match[1]}/{match[2]}", match[3] or "main")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("uri", help="the model: hf://ORG/NAME[:REVISION] (REVISION default main)")
    parser.add_argument(
        "--into",
        type=Path,
        required=True,
        help="the model's folder on the shared volume (refs/ and snapshots/ go under it)",
    )
    parser.add_argument(
        "--attempts",
        type=int,
        default=5,
        help="downloads of the missing or wrong files before giving up; default %(default)s",
    )


def run(args: argparse.Namespace) -> int:
    source = Source.parse(args.uri)
    if args.attempts < 1:
        raise UserError(f"--attempts {args.attempts}: give at least 1")
    return stage(source, args.into, args.attempts, Hub())


class Hub:
    """The three Hub calls staging makes, through huggingface_hub (imported only here)."""

    def __init__(self) -> None:
        from huggingface_hub import HfApi

        self.api = HfApi()

    def commit_of(self, source: Source) -> str:
        return str(self.api.model_info(source.repo, revision=source.revision).sha)

    def files(self, source: Source, commit: str) -> tuple[FileEntry, ...]:
        entries = []
        for item in self.api.list_repo_tree(source.repo, revision=commit, recursive=True):
            if getattr(item, "size", None) is None or not hasattr(item, "blob_id"):
                continue  # a folder
            lfs = getattr(item, "lfs", None)
            entries.append(
                FileEntry(
                    path=item.path,
                    size=int(item.size),
                    sha256=str(lfs.sha256) if lfs else "",
                    git_sha1="" if lfs else str(item.blob_id),
                )
            )
        return tuple(sorted(entries, key=lambda entry: entry.path))

    def download(self, source: Source, commit: str, into: Path) -> None:
        """``snapshot_download`` of the commit; ``RefusedError`` when the Hub refuses the caller
        (no retry makes a missing or wrong token right)."""
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

        try:
            snapshot_download(source.repo, revision=commit, local_dir=into)
        except (GatedRepoError, RepositoryNotFoundError) as error:
            raise RefusedError(_short(error)) from None
        except HfHubHTTPError as error:
            status = getattr(error.response, "status_code", None)
            if status in (401, 403):
                raise RefusedError(_short(error)) from None
            raise


class RefusedError(Exception):
    """The Hub refused the caller's credential for the repository."""


def stage(
    source: Source,
    root: Path,
    attempts: int,
    hub: Hub,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    known = read_ref(root, source.revision)
    if known is not None and _whole(snapshot_dir(root, known)):
        log.info(
            "%s@%s is staged already as %s (refs/%s): nothing to download",
            source.repo,
            source.revision,
            known,
            source.revision,
        )
        return 0
    commit = known or (source.revision if COMMIT.match(source.revision) else None)
    commit = commit or _hub_call("resolve the revision", lambda: hub.commit_of(source))
    files = _hub_call("list the commit's files", lambda: hub.files(source, commit))
    snapshot = snapshot_dir(root, commit)
    log.info(
        "staging %s@%s = %s: %d files, %d bytes, into %s",
        source.repo,
        source.revision,
        commit,
        len(files),
        sum(f.size for f in files),
        snapshot,
    )
    _adopt(root, source, snapshot, files)
    room.check(snapshot, files, f"{source.repo}@{source.revision} ({commit})")
    left = _download(source, commit, files, snapshot, attempts, hub, sleep)
    if left:
        log.error(
            "%s@%s is not staged after %d attempts: %s; the group will not start on this "
            "snapshot (run the Job again once the Hub answers)",
            source.repo,
            commit,
            attempts,
            "; ".join(left[:10]),
        )
        return 1
    write_atomic(snapshot / ".multinode-llm" / "manifest.json", _manifest(source, commit, files))
    write_atomic(ref_file(root, source.revision), commit + "\n")
    log.info("staged %s@%s as %s", source.repo, source.revision, commit)
    return 0


def _adopt(root: Path, source: Source, snapshot: Path, files: tuple[FileEntry, ...]) -> None:
    """Link into ``snapshot`` each file it lacks that an older release of the chart left whole on
    the volume, checked against the commit's size and hash (verified bytes only): a hard link on
    the same volume takes no second copy; where the volume has none, a copy."""
    missing = [entry for entry, _ in defects(snapshot, files, hashes=False)]
    adopted = 0
    for folder in (root / source.revision, root):
        for entry in [e for e in missing if not defects(folder, (e,), hashes=True)]:
            target = snapshot / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            try:
                os.link(folder / entry.path, target)
            except OSError:
                shutil.copy2(folder / entry.path, target)
            missing.remove(entry)
            adopted += 1
    if adopted:
        log.info("adopted %d files an older release staged (flat under %s)", adopted, root)


def _download(
    source: Source,
    commit: str,
    files: tuple[FileEntry, ...],
    snapshot: Path,
    attempts: int,
    hub: Hub,
    sleep: Callable[[float], None],
) -> list[str]:
    """Download until every file is whole (sizes and hashes); what is still wrong at the end."""
    left = defects(snapshot, files, hashes=True)
    for attempt in range(1, attempts + 1):
        if not left:
            return []
        try:
            hub.download(source, commit, snapshot)
        except RefusedError as error:
            log.error(
                "the Hub refuses this token for %s: %s; give a token that may read it "
                "(model.hfTokenSecret)",
                source.repo,
                error,
            )
            break
        except Exception as error:  # huggingface_hub raises many types; each is one more try
            log.warning("download attempt %d of %d failed: %s", attempt, attempts, _short(error))
        left = defects(snapshot, files, hashes=True)
        if left and attempt < attempts:
            log.warning("attempt %d: %d files not whole yet: %s", attempt, len(left), left[0][1])
            _forget(snapshot, [entry for entry, _ in left])
            sleep(min(2.0**attempt, MAX_BACKOFF_S))
    return [why for _, why in left]


def _forget(snapshot: Path, wrong: list[FileEntry]) -> None:
    """Remove wrong files and huggingface_hub's record of them, so the next try fetches them."""
    for entry in wrong:
        (snapshot / entry.path).unlink(missing_ok=True)
        metadata = snapshot / ".cache" / "huggingface" / "download" / f"{entry.path}.metadata"
        metadata.unlink(missing_ok=True)


def _whole(snapshot: Path) -> bool:
    manifest = load_manifest(snapshot)
    return manifest is not None and not problems(snapshot, manifest.files, hashes=False)


def _manifest(source: Source, commit: str, files: tuple[FileEntry, ...]) -> str:
    return Manifest(
        repo=source.repo, revision=source.revision, commit=commit, files=files
    ).to_json()


def _hub_call(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as error:  # the Hub's errors carry the status and the reason
        raise UserError(f"could not {what} on the Hub: {_short(error)}") from None


def _short(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__
