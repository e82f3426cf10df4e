"""The Hub protocol's request paths, parsed and validated: the one place a URL becomes a target.

Every path is split on ``/`` while still percent-encoded, and only then is each segment decoded, so
an encoded slash can never create a segment. A path is refused (400) when a decoded segment is
empty, ``.`` or ``..``, carries a backslash, a control character or a second layer of encoding
(``%252e``), or when a request target is not a path at all (``http://host/...``). ``%2F`` is allowed
in exactly one place: a revision (``refs%2Fpr%2F1``), which the Hub encodes as one segment.

The cache never maps these names onto its own disk (blobs are stored by content hash); validation
keeps upstream URLs exactly what the client meant and closes the door on tricks before they matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

# API plural -> the prefix of the repo's file URLs (models live at the root).
REPO_TYPES: dict[str, str] = {"models": "", "datasets": "datasets/", "spaces": "spaces/"}
_URL_PREFIXES = {"datasets": "datasets", "spaces": "spaces"}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DOUBLE_ENCODED = re.compile(r"%(2e|2f|5c|25|00)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")
API_ACTIONS = frozenset(
    {"revision", "tree", "paths-info", "xet-read-token", "preupload", "commit", "commits", "refs"}
)


class BadPathError(ValueError):
    """A request path the cache refuses with 400; the message says which part and why."""


@dataclass(frozen=True)
class Repo:
    type: str  # "models" | "datasets" | "spaces"
    id: str  # "org/name", or a legacy "name"

    @property
    def url_prefix(self) -> str:
        return REPO_TYPES[self.type]

    def __str__(self) -> str:
        return f"{self.type}/{self.id}"


@dataclass(frozen=True)
class FileTarget:
    """``/{prefix}{repo}/resolve/{revision}/{path}``: one file of one revision."""

    repo: Repo
    revision: str  # decoded: "main", "refs/pr/1" or a 40-hex commit
    path: str  # decoded, "/"-separated, every segment validated

    def url_path(self, revision: str | None = None) -> str:
        """The percent-encoded path of this file's resolve URL, at ``revision`` if given."""
        rev = quote(revision or self.revision, safe="")
        return f"/{self.repo.url_prefix}{self.repo.id}/resolve/{rev}/{quote(self.path, safe='/')}"


@dataclass(frozen=True)
class ApiTarget:
    """``/api/{type}/{repo}[/{action}[/{revision}[/{path}]]]``."""

    repo: Repo
    action: str  # "" (repo info), "revision", "tree", "paths-info", "xet-read-token", ...
    revision: str | None
    path: str  # the rest after the revision, decoded ("" when absent)

    def url_path(self, revision: str | None = None) -> str:
        """The percent-encoded path of this API call, at ``revision`` if given."""
        parts = [f"/api/{self.repo.type}/{self.repo.id}"]
        if self.action:
            parts.append(self.action)
        rev = revision or self.revision
        if rev is not None:
            parts.append(quote(rev, safe=""))
        if self.path:
            parts.append(quote(self.path, safe="/"))
        return "/".join(parts)


@dataclass(frozen=True)
class OtherTarget:
    """Any other validated path (``/api/whoami-v2``...): passed through upstream as it came."""

    raw_path: str


Target = FileTarget | ApiTarget | OtherTarget


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


def parse(raw_path: str) -> Target:
    """The target of a raw (still percent-encoded, query-less) request path; raises BadPathError."""
    if not raw_path.startswith("/") or raw_path.startswith("//"):
        raise BadPathError(
            f"request target {raw_path[:80]!r} is not an absolute path such as /org/model"
        )
    raw = raw_path[1:].split("/")
    if raw and raw[0] == "api":
        return _parse_api(raw)
    if "resolve" in raw:
        return _parse_resolve(raw)
    for segment in raw:
        _plain(segment, "path segment")
    return OtherTarget(raw_path)


def _parse_resolve(raw: list[str]) -> FileTarget:
    repo_type = "models"
    if raw[0] in _URL_PREFIXES and len(raw) > 1 and raw[1] != "resolve":
        repo_type, raw = raw[0], raw[1:]
    repo_len = _repo_length(raw, "resolve")
    if repo_len is None or len(raw) < repo_len + 3:
        raise BadPathError("resolve URL must look like /{repo}/resolve/{revision}/{path}")
    repo = _repo(repo_type, raw[:repo_len])
    revision = _revision(raw[repo_len + 1])
    path = "/".join(_plain(segment, "file path segment") for segment in raw[repo_len + 2 :])
    return FileTarget(repo, revision, path)


def _parse_api(raw: list[str]) -> ApiTarget | OtherTarget:
    if len(raw) < 3 or raw[1] not in REPO_TYPES:
        for segment in raw:
            _plain(segment, "path segment")
        return OtherTarget("/" + "/".join(raw))
    repo_type, rest = raw[1], raw[2:]
    repo_len = _repo_length(rest, None)
    if repo_len is None:
        raise BadPathError(f"API path /api/{repo_type}/... names no repository such as org/model")
    repo = _repo(repo_type, rest[:repo_len])
    rest = rest[repo_len:]
    if not rest:
        return ApiTarget(repo, "", None, "")
    action = _plain(rest[0], "API action")
    revision = _revision(rest[1]) if len(rest) > 1 else None
    path = "/".join(_plain(segment, "path segment") for segment in rest[2:])
    return ApiTarget(repo, action, revision, path)


def _repo_length(raw: list[str], keyword: str | None) -> int | None:
    """How many segments the repo id spans: 2 (org/name), or 1 for a legacy name such as gpt2.

    In a resolve URL the repo is what precedes ``resolve``; in an API path it is one segment when
    that alone is the path or a known action follows it, else two.
    """
    if keyword:
        if len(raw) > 2 and raw[2] == keyword:
            return 2
        return 1 if len(raw) > 1 and raw[1] == keyword else None
    if not raw:
        return None
    return 1 if len(raw) == 1 or raw[1] in API_ACTIONS else 2


def _repo(repo_type: str, segments: list[str]) -> Repo:
    names = [_plain(segment, "repository name") for segment in segments]
    for name in names:
        if not _NAME.match(name) or ".." in name or "--" in name:
            raise BadPathError(
                f"repository name {name!r} is not valid: use letters, digits, '-', '_' and '.', "
                "starting with a letter or digit"
            )
    return Repo(repo_type, "/".join(names))


def _revision(segment: str) -> str:
    """A revision: one segment that may carry encoded slashes (refs%2Fpr%2F1), no empty part."""
    revision = _decode(segment, "revision")
    if not revision or any(part in ("", ".", "..") for part in revision.split("/")):
        raise BadPathError(
            f"revision {revision!r} is not valid: use a branch, tag, refs/pr/N or commit"
        )
    return revision


def _plain(segment: str, what: str) -> str:
    """One decoded segment that must not contain a slash."""
    decoded = _decode(segment, what)
    if decoded in ("", ".", "..") or "/" in decoded:
        raise BadPathError(
            f"{what} {decoded!r} is not allowed: no empty, '.', '..' or encoded '/' parts"
        )
    return decoded


def _decode(segment: str, what: str) -> str:
    try:
        decoded = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise BadPathError(f"{what} {segment!r} is not valid percent-encoded UTF-8") from None
    if _CONTROL.search(decoded):
        raise BadPathError(f"{what} {segment!r} contains a backslash or a control character")
    if _DOUBLE_ENCODED.search(decoded):
        raise BadPathError(f"{what} {segment!r} is encoded twice; send each character encoded once")
    return decoded
