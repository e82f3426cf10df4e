# The storage suite reuses the cache suite's fake Hub and cache processes.
from tests.cache.conftest import fake_hub, start_cache

__all__ = ["fake_hub", "start_cache"]
