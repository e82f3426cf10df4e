"""HTTP Range requests as the Hub's clients send them: one range, end clamped, 416 past the end.

hf_transfer asks for one byte past the end of a file, so an end beyond the size is clamped rather
than refused; a start at or past the size is unsatisfiable. Anything that is not a single byte range
(several ranges, another unit, digits other than ASCII ones, garbage) is ignored and the whole file
is sent, as RFC 9110 allows. A number too long to be any file's offset stands for "past any end"
(Python would refuse to convert one of over 4,300 digits, and nothing needs its value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")
_PAST_ANY_END = 10**18  # more bytes than any file has


class UnsatisfiableRangeError(ValueError):
    """The range starts at or past the end: answer 416 with ``Content-Range: bytes */size``."""


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # inclusive, like Content-Range

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The one range ``header`` asks for within ``size`` bytes, or None for the whole file."""
    if not header:
        return None
    match = _RANGE.match(header.strip().replace(" ", ""))
    if not match:
        return None
    first, last = match.groups()
    if not first:
        if not last:
            return None
        suffix = _number(last)  # "bytes=-N": the last N bytes
        if suffix == 0 or size == 0:
            raise UnsatisfiableRangeError(header)
        return ByteRange(max(0, size - suffix), size - 1)
    start = _number(first)
    if last and _number(last) < start:
        return None  # syntactically invalid: ignore it
    if start >= size:
        raise UnsatisfiableRangeError(header)
    end = _number(last) if last else size - 1
    return ByteRange(start, min(end, size - 1))


def _number(digits: str) -> int:
    return int(digits) if len(digits) < 18 else _PAST_ANY_END
