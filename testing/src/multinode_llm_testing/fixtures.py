"""pytest fixtures more than one suite uses: the fake Hub and caches against it.

A suite's conftest imports the ones it needs (``from multinode_llm_testing.fixtures import
fake_hub``), so no suite imports another suite's conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from multinode_llm_testing.cache import CacheProcess
from multinode_llm_testing.fake_hub import FakeHub


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub().start()
    yield hub
    hub.stop()


@pytest.fixture
def start_cache(tmp_path: Path, fake_hub: FakeHub) -> Iterator[Callable[..., CacheProcess]]:
    """Start caches against the fake hub; each is stopped after the test, its log shown."""
    started: list[CacheProcess] = []

    def start(
        *args: str, store: Path | None = None, upstream: str | None = None, **kwargs: Any
    ) -> CacheProcess:
        index = len(started)
        cache = CacheProcess(
            upstream or fake_hub.url,
            store or tmp_path / f"store{index}",
            tmp_path / f"cache{index}.log",
            args=args,
            **kwargs,
        )
        started.append(cache)
        return cache.wait_ready()

    yield start
    for cache in started:
        cache.stop()
        print(f"--- {cache.log_path.name} ---\n{cache.log_tail()}")
