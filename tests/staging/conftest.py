# The staging suite stages from the cache suite's fake Hub.
from __future__ import annotations

from tests.cache.conftest import fake_hub

__all__ = ["fake_hub"]
