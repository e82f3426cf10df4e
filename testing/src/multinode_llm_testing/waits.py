"""Waiting on a condition with a deadline, never on a sleep (DEVELOPERS.md, "Rules for tests")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(TimeoutError, AssertionError):
    """A deadline passed. Both a TimeoutError (what the benchmarks record as a failure) and an
    AssertionError (what pytest reports as a failed expectation), so every caller reads it as its
    own kind of failure."""


def wait_until(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05
) -> T:
    """Poll ``condition`` until it returns something truthy and return that; past ``timeout``
    seconds raise WaitTimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_seconds(
    condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> float:
    """wait_until, returning how many seconds the condition took to hold (a measured time)."""
    started = time.monotonic()
    wait_until(condition, timeout, what, interval)
    return time.monotonic() - started
