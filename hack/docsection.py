"""The generated section of a document, shared by the generators in hack/: the text between two
marker lines, and the write (or ``--check``) each of them ends with.

A generator imports it as a sibling: ``python3 hack/NAME.py`` has hack/ on its path, and pytest
gets it from the ``pythonpath`` of tox.ini when a test loads a generator by path.
"""

from __future__ import annotations

import sys
from pathlib import Path


def replaced(doc: str, start: str, end: str, body: str, path: Path) -> str:
    """``doc`` with the text between the ``start`` and ``end`` lines (they stay) set to ``body``."""
    if start not in doc or end not in doc:
        raise SystemExit(
            f"{path}: markers missing; add the lines\n{start}\n{end}\nwhere the generated text goes"
        )
    head, rest = doc.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n\n{body}\n\n{end}{tail}"


def write_or_check(path: Path, new: str, check: bool, script: str) -> int:
    """Write ``new`` to ``path``; with ``check``, write nothing and exit 1 where they differ."""
    if not check:
        path.write_text(new)
        return 0
    if new != path.read_text():
        print(
            f"{path} has drifted from what {script} generates: run python3 {script}",
            file=sys.stderr,
        )
        return 1
    return 0
