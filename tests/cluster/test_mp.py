"""vLLM's own multi-node executor (``group.executor=mp``) on real KServe: the release the chart
defaults to runs KServe's Ray-less multi-node mode (0.18+); the README's install serves a PP=2
group whose head ranks the worker, a killed worker heals, and real KServe made what the emulation
says."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import oracle
import pytest
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from multinode_llm_testing.pod_processes import check_no_ray
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


def test_the_kserve_v2_routes_and_the_metrics_answer(group: Installed) -> None:
    checks.check_v2(group)
    checks.check_metrics(group)


def test_no_ray_process_runs_in_the_group(group: Installed) -> None:
    for role in ("head", "worker"):
        check_no_ray(group.pod(role)["metadata"]["name"], role, group.processes(role))


def test_the_head_gave_the_worker_rank_1_and_counts_both_nodes(group: Installed) -> None:
    head = group.status_json("head")["facts"]
    assert head["executor"] == "mp"
    assert (head["nodes"], head["expected_nodes"], head["gpus"]) == (2, 2, 2)
    worker = group.status_json("worker")["facts"]
    assert (worker["executor"], worker["rank"], worker["engine_running"]) == ("mp", 1, True)


def test_a_killed_worker_heals(group: Installed) -> None:
    """The mp head sees the worker's status port refuse connections and exits 1 naming rank 1."""
    took = group.heals_after_killing("worker")
    record(f"KServe {group.cluster.kserve}", "mp: killed worker -> serving again", took)
    assert group.last_exit("head")["exitCode"] == 1
    assert re.search(r"exit 1: (lost )?worker rank 1 \(pod ", group.log("head", previous=True))


def test_a_killed_head_makes_the_worker_start_over(group: Installed) -> None:
    first = _epoch(group.log("worker"))
    took = group.heals_after_killing("head")
    record(f"KServe {group.cluster.kserve}", "mp: killed head -> serving again", took)
    assert group.last_exit("worker")["exitCode"] == 1
    assert _epoch(group.log("worker")) not in (None, first)  # it joined the new head
    for role in ("head", "worker"):
        check_no_ray(group.pod(role)["metadata"]["name"], role, group.processes(role))


def _epoch(log: str) -> str | None:
    """The epoch of the worker's last grant, from its log."""
    found = re.findall(r"joined as rank \d+ of \d+ \(epoch (\w+),", log)
    return found[-1] if found else None
