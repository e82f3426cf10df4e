# The fake Hub and caches against it come from the shared test-support package (testing/).
from __future__ import annotations

from multinode_llm_testing.fixtures import fake_hub, start_cache

__all__ = ["fake_hub", "start_cache"]
