# The storage suite reuses the cache suite's fake Hub and cache processes.
from __future__ import annotations

import pytest
from multinode_llm_testing.fixtures import fake_hub, start_cache
from multinode_llm_testing.storage_sites import Site, build_sites, releases

__all__ = ["fake_hub", "start_cache", "storage_sites"]


@pytest.fixture(scope="session")
def storage_sites() -> dict[str, Site]:
    """Each supported release's storage code with the libraries its image pins, by version (built
    by pip into ~/.cache/multinode-llm/storage-sites on the first run, reused after)."""
    return build_sites(releases())
