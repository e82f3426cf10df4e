"""Pytest wiring of the cluster suite: the ``cluster`` marker, prerequisites, the tiny model."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multinode_llm_local import cluster as local_cluster
from realcluster import TIMINGS, TOOLS, Clusters, record


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: the chart on a real control plane with real KServe (root, Go)"
    )
    config.addinivalue_line(
        "markers",
        "lws_mp: the LeaderWorkerSet scenarios again with group.executor=mp (tox -e cluster-lws "
        "runs them with both executors)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("real cluster timings (measured in this run)")
    for scenario, what, seconds in TIMINGS:
        terminalreporter.write_line(f"{scenario:<22} {what:<58} {seconds:7.1f} s")


def prerequisites(serving: bool = True) -> str:
    """Why a real cluster cannot run here, or "" when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, iptables): run the cluster suite as root"
    for tool in ("go", "iptables", "openssl"):
        if shutil.which(tool) is None:
            return f"needs {tool}: tox -e cluster installs iptables; Go 1.26 must be installed"
    for tool in ("kubectl", "helm3", "helm4"):
        if not (TOOLS / tool).exists():
            return f"needs {tool}: run bash hack/install-tools.sh"
    for module in ("vllm", "ray", "openai") if serving else ():
        if importlib.util.find_spec(module) is None:
            return f"needs {module}: run through tox -e cluster"
    return ""


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny generated model (``make-model``), copied into each release's claim."""
    reason = prerequisites()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("model") / "tiny-llama"
    started = time.monotonic()
    local_cluster.make_model(folder)
    record("tiny model", "make-model", time.monotonic() - started)
    return folder


@pytest.fixture(scope="session")
def clusters() -> Iterator[Clusters]:
    """The session's real clusters, one at a time (``clusters.get(release)``)."""
    reason = prerequisites(serving=False)
    if reason:
        pytest.skip(reason)
    running = Clusters()
    try:
        yield running
    finally:
        running.close()
