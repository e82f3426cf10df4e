"""Pytest wiring of the e2e suite: the ``e2e`` marker, the tiny model, the timings summary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from groups import TIMINGS, group_prerequisites, record
from multinode_llm_local import cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: the chart's pods run end to end by the local cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("local cluster timings (measured in this run)")
    for scenario, what, seconds in TIMINGS:
        terminalreporter.write_line(f"{scenario:<34} {what:<44} {seconds:7.1f} s")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A claim directory holding the tiny generated model at ``tiny-llama`` (pvc://models/tiny-llama)."""
    reason = group_prerequisites()
    if reason:
        pytest.skip(reason)
    claim = tmp_path_factory.mktemp("claim-models")
    started = time.monotonic()
    cluster.make_model(claim / "tiny-llama")
    record("tiny model", "make-model", time.monotonic() - started)
    claim.chmod(0o755)
    return claim
