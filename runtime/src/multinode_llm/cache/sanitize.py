"""What upstream says that clients must not see: Xet signals, and links that point past the cache.

A client that sees ``X-Xet-Hash``, a ``rel="xet-auth"`` link, ``X-Xet-Refresh-Route`` or a tree
entry's ``xetHash`` talks to the Xet CAS directly and bypasses the cache, so all of those are
removed. Pagination links are absolute URLs the client follows verbatim, so they are rewritten to
the cache's own base URL. Responses copy only the headers in ``PASSED_HEADERS``; every other
upstream header (cookies, Xet, CDN internals) stays behind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

XET_LINK_RELS = frozenset({"xet-auth", "xet-reconstruction-info"})
PASSED_HEADERS = ("Content-Type", "X-Error-Code", "X-Error-Message", "X-Repo-Commit", "ETag")
_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^,;]+)*)")
_REL = re.compile(r'rel\s*=\s*"?([^";]+)"?')


def clean_json(body: bytes) -> tuple[Any, bytes] | None:
    """``body`` parsed, and re-encoded, without any ``xetHash`` key at any depth; None when it is
    not JSON or nests too deep to be sane (json raises RecursionError past about 1,000 levels)."""
    try:
        value = json.loads(body, object_hook=_without_xet)
        return value, json.dumps(value).encode()
    except (ValueError, RecursionError):
        return None


def _without_xet(entry: dict[str, Any]) -> dict[str, Any]:
    entry.pop("xetHash", None)
    return entry


def rewrite_links(header: str, base_url: str) -> str | None:
    """``header`` without Xet entries, its URLs moved onto ``base_url``; None if none are left."""
    kept: list[str] = []
    for match in _LINK.finditer(header):
        url, params = match.group(1), match.group(2)
        rel = _REL.search(params)
        if rel and rel.group(1).strip() in XET_LINK_RELS:
            continue
        kept.append(f"<{relocate(url, base_url)}>{params}")
    return ", ".join(kept) or None


def relocate(url: str, base_url: str) -> str:
    """``url``'s path and query on ``base_url`` (which has no trailing slash)."""
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"{base_url}{parts.path}{query}"


def passed_headers(upstream: Mapping[str, str], base_url: str) -> dict[str, str]:
    """The upstream response headers a client may see, Link rewritten and Xet removed."""
    headers = {name: upstream[name] for name in PASSED_HEADERS if name in upstream}
    if "Link" in upstream and (link := rewrite_links(upstream["Link"], base_url)):
        headers["Link"] = link
    return headers


def next_link(header: str | None) -> str | None:
    """The path and query of a ``Link`` header's ``rel="next"`` entry, if it has one."""
    for match in _LINK.finditer(header or ""):
        rel = _REL.search(match.group(2))
        if rel and rel.group(1).strip() == "next":
            parts = urlsplit(match.group(1))
            return parts.path + (f"?{parts.query}" if parts.query else "")
    return None
