"""``bench`` is the repository's top-level package, not an installed one: these tests import it
from the checkout (pytest puts only this folder on ``sys.path``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
