"""vLLM's own multi-node executor (``group.executor=mp``) on real KServe: the release the chart
defaults to runs KServe's Ray-less multi-node mode (0.18+); the README's install serves a PP=2
group whose head ranks the worker, a killed worker heals, and real KServe made what the emulation
says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import oracle
import pytest
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from realcluster import Clusters, Installed, RealCluster, install, record, serving_lock

NAMESPACE = "mp"


@pytest.fixture(scope="module")
def cluster(clusters: Clusters, tiny_model: Path) -> Iterator[RealCluster]:
    release = releases.default()
    if "mp" not in release.controller.executors:
        pytest.skip(f"KServe {release.version} has no Ray-less multi-node mode")
    running = clusters.get(release.version)
    running.model_claim(NAMESPACE, "models", tiny_model)
    yield running
    running.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture(scope="module")
def group(cluster: RealCluster) -> Iterator[Installed]:
    with serving_lock():
        installed = install(cluster, "mp", NAMESPACE, "group.executor=mp")
        yield installed
        cluster.helm("uninstall", installed.release, "--namespace", NAMESPACE, "--wait")


def test_the_mp_group_answers_a_chat_completion(group: Installed) -> None:
    checks.check_models(group)
    checks.check_streaming_chat(group)


def test_real_kserve_made_what_the_emulation_says(group: Installed) -> None:
    assert oracle.differences(group, group.manifest()) == []


def test_a_killed_worker_heals(group: Installed) -> None:
    took = group.heals_after_killing("worker")
    record(f"KServe {group.cluster.kserve}", "mp: killed worker -> serving again", took)
