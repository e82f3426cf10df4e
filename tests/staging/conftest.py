# The staging suite stages from the cache suite's fake Hub.
from __future__ import annotations

from multinode_llm_testing.fixtures import fake_hub

__all__ = ["fake_hub"]
