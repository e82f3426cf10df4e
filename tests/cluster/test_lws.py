"""``group.backend=lws`` on the real control plane, with the real LeaderWorkerSet controller built
from ``sigs.k8s.io/lws`` (``multinode-llm-local cluster lws``): groups scale, share one Service,
heal one at a time and roll out group by group.

One release per executor (mp and Ray), in its own namespace, taken through the scenarios in order:
one group serves; ``groups.replicas`` 1 -> 2 adds a group that serves; requests through the Service
reach both; a killed worker leaves the other group serving while its own group heals; a change of
``image.tag`` rolls the groups one at a time, never leaving fewer than ``replicas - maxUnavailable``
serving. Each step waits as the README says (``--wait --wait-for-jobs``): the readiness Job asks
every group's head by its own name.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from multinode_llm.errors import UserError
from multinode_llm_local.controlplane import cluster as real
from multinode_llm_local.controlplane import lws
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from realcluster import (
    CHART,
    HEAL_S,
    MODEL,
    PREFIX,
    Clusters,
    Endpoint,
    Obj,
    RealCluster,
    chart_args,
    condition,
    helm_chart,
    record,
    serving_lock,
    set_flags,
    wait_for,
)

LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
ALL_EXECUTORS = ("ray", "mp")  # each in its namespace, lws-<executor>
# Ray, the chart's default, then mp (about 12 minutes more: every scenario starts whole groups;
# `-m "not lws_mp"` leaves it out).
EXECUTORS = ("ray", pytest.param("mp", marks=pytest.mark.lws_mp))


@pytest.fixture(scope="module")
def cluster(clusters: Clusters, tiny_model: Path) -> Iterator[RealCluster]:
    running = clusters.get(releases.default().version)
    if not running.has_crd(LWS_CRD):
        real.leader_worker_set(PREFIX)
    for executor in ALL_EXECUTORS:
        running.model_claim(f"lws-{executor}", "models", tiny_model)
    yield running
    for executor in ALL_EXECUTORS:
        running.kubectl("delete", "namespace", f"lws-{executor}", "--wait=false")
    real.leader_worker_set(PREFIX, remove=True)


# The newest LeaderWorkerSet before rollingUpdateConfiguration.partition (v0.7.0), a real CRD.
TOO_OLD = "v0.6.2"


def test_helm_refuses_lws_where_the_cluster_has_none_or_one_too_old(clusters: Clusters) -> None:
    """Runs before the module's LeaderWorkerSet is installed: ``helm install --dry-run=server``
    (which reads the cluster through ``lookup``) names what is missing, with Helm 3 and 4."""
    running = clusters.get(releases.default().version)
    if running.has_crd(LWS_CRD):
        pytest.skip("LeaderWorkerSet is installed already: no cluster without it to ask")
    try:
        crds = lws.module_dir(TOO_OLD) / "config" / "crd" / "bases"
        old_crd = crds / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    except UserError as why:
        pytest.skip(f"LeaderWorkerSet {TOO_OLD}'s CRD is not to be had here: {why}")

    def refusals() -> list[str]:
        out = []
        for helm in (3, 4):
            result = running.helm(
                "install", "lws-refused", str(CHART), "--namespace", "default",
                *chart_args(running.kserve, set_flags(["group.backend=lws"])),
                "--dry-run=server", version=helm, check=False,
            )  # fmt: skip
            assert result.returncode != 0, f"helm {helm} installed it"
            out.append(result.stderr)
        return out

    for stderr in refusals():
        assert "this cluster has no LeaderWorkerSet" in stderr, stderr
    running.kubectl("apply", "--server-side", "-f", str(old_crd))
    try:
        running.wait_established(LWS_CRD)
        for stderr in refusals():
            assert "older than v0.7.0" in stderr, stderr
    finally:
        running.kubectl("delete", "crd", LWS_CRD, "--wait")


@dataclass
class Groups:
    """One release of the chart with ``group.backend=lws``: its groups as the tests see them."""

    cluster: RealCluster
    executor: str
    sets: list[str] = field(default_factory=list)
    model: str = MODEL

    @property
    def namespace(self) -> str:
        return f"lws-{self.executor}"

    @property
    def name(self) -> str:
        return f"{self.release}-multinode-llm"

    @property
    def release(self) -> str:
        return f"lws-{self.executor}"

    @property
    def base_url(self) -> str:
        """The Service over every group's head, through its ClusterIP."""
        return f"http://{self.cluster.cluster_ip(self.namespace, self.name + '-predictor')}:80"

    def helm(self, verb: str, *sets: str, timeout: str = "15m") -> float:
        """``helm install`` or ``upgrade`` with every value set so far, as the README waits."""
        self.sets = [*self.sets, *sets]
        started = time.monotonic()
        helm_chart(self.cluster, verb, self.release, self.namespace, self.sets, timeout=timeout)
        return time.monotonic() - started

    def heads(self) -> list[Obj]:
        """Every group's head pod, by group index."""
        found = self.cluster.pods(
            self.namespace, f"{NAME_LABEL}={self.name},app.kubernetes.io/component=head"
        )
        return sorted(found, key=lambda pod: int(pod["metadata"]["labels"][GROUP_LABEL]))

    def pod(self, group: int, role: str) -> Obj:
        selector = (
            f"{NAME_LABEL}={self.name},{GROUP_LABEL}={group},app.kubernetes.io/component={role}"
        )
        [found] = self.cluster.pods(self.namespace, selector)
        return found

    def ready_groups(self) -> set[int]:
        """The groups whose head is Ready: its group formed and its engine serves."""
        return {
            int(pod["metadata"]["labels"][GROUP_LABEL])
            for pod in self.heads()
            if condition(pod, "Ready") and not pod["metadata"].get("deletionTimestamp")
        }

    def head_url(self, group: int) -> str:
        return f"http://{self.pod(group, 'head')['status']['podIP']}:8080"

    def facts(self, group: int, role: str) -> Obj:
        ip = self.pod(group, role)["status"]["podIP"]
        with urllib.request.urlopen(f"http://{ip}:8081/status", timeout=5) as answer:
            found: Obj = json.loads(answer.read())["facts"]
        return found

    def completions(self, group: int) -> float:
        """Requests the group's vLLM finished (``vllm:request_success_total``, every reason)."""
        with urllib.request.urlopen(self.head_url(group) + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total{")
        )

    def serves_at(self, url: str) -> bool:
        return checks.answers(Endpoint(url))

    def kill(self, group: int, role: str) -> None:
        """SIGKILL the container's init: every process of it dies; the node agent restarts it."""
        status = self.pod(group, role)["status"]["containerStatuses"][0]
        pid = int(status["containerID"].removeprefix("local://"))
        assert pid > 0, status
        os.kill(pid, signal.SIGKILL)

    def restarts(self, group: int, role: str) -> int:
        statuses = self.pod(group, role)["status"].get("containerStatuses") or []
        return sum(int(s.get("restartCount", 0)) for s in statuses)


@pytest.fixture(scope="module", params=EXECUTORS)
def groups(request: pytest.FixtureRequest, cluster: RealCluster) -> Iterator[Groups]:
    installed = Groups(cluster, request.param)
    with serving_lock():
        took = installed.helm("install", "group.backend=lws", f"group.executor={request.param}")
        record(f"LWS {request.param}", "helm install, 1 group (PP=2)", took)
        yield installed
        cluster.helm("uninstall", installed.release, "--namespace", installed.namespace, "--wait")


def test_one_group_serves_behind_the_service(groups: Groups) -> None:
    assert groups.ready_groups() == {0}
    checks.check_models(groups)
    head = groups.facts(0, "head")
    assert (head["executor"], head["nodes"], head["expected_nodes"]) == (groups.executor, 2, 2)


def test_two_replicas_add_a_group_that_serves(groups: Groups) -> None:
    took = groups.helm("upgrade", "groups.replicas=2")
    record(f"LWS {groups.executor}", "groups.replicas 1 -> 2: both serve", took)
    assert groups.ready_groups() == {0, 1}
    assert groups.serves_at(groups.head_url(1))
    worker = groups.facts(1, "worker")
    assert worker["executor"] == groups.executor
    # LWS told the new group's worker its own head, not group 0's.
    env = {
        e["name"]: e.get("value") for e in groups.pod(1, "worker")["spec"]["containers"][0]["env"]
    }
    head = groups.pod(1, "head")["metadata"]["name"]
    assert env["LWS_LEADER_ADDRESS"] == f"{head}.{groups.name}.{groups.namespace}"


def test_requests_through_the_service_reach_both_groups(groups: Groups) -> None:
    before = [groups.completions(group) for group in (0, 1)]
    for _ in range(24):
        assert groups.serves_at(groups.base_url)
    gained = [groups.completions(group) - was for group, was in zip((0, 1), before, strict=True)]
    assert sum(gained) >= 24, gained
    assert min(gained) > 0, f"one group got every request: {gained}"


def test_a_killed_worker_leaves_the_other_group_serving_and_heals(groups: Groups) -> None:
    before = groups.restarts(1, "worker")
    groups.kill(1, "worker")
    wait_for(lambda: 1 not in groups.ready_groups(), 120, "group 1's head leaving the Service")
    assert groups.ready_groups() == {0}
    assert groups.serves_at(groups.head_url(0)), "group 0 stopped serving"
    assert groups.serves_at(groups.base_url), "the Service did not answer from group 0"
    took = wait_for(
        lambda: groups.restarts(1, "worker") > before and groups.ready_groups() == {0, 1},
        HEAL_S,
        "group 1 serving again",
    )
    record(f"LWS {groups.executor}", "killed worker of group 1 -> serving again", took)
    assert groups.serves_at(groups.head_url(1))


def test_a_rollout_goes_group_by_group(groups: Groups) -> None:
    """``image.tag`` changes every pod: with maxUnavailable 1 and maxSurge 0 one group at a time
    stops, and at least replicas - maxUnavailable = 1 serves throughout."""
    old = {pod["metadata"]["uid"] for pod in groups.heads()}
    seen: list[tuple[float, set[int]]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(Exception):
                seen.append((time.monotonic(), groups.ready_groups()))
            done.wait(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        took = groups.helm("upgrade", "image.tag=0.1.0-rollout")
    finally:
        done.set()
        watcher.join(timeout=30)
    record(f"LWS {groups.executor}", "image.tag rollout of 2 groups", took)
    assert not old & {pod["metadata"]["uid"] for pod in groups.heads()}, "a head was not replaced"
    assert all(pod["spec"]["containers"][0]["image"].endswith(":0.1.0-rollout")
               for pod in groups.heads())  # fmt: skip
    fewest = min(len(ready) for _, ready in seen)
    assert fewest >= 1, f"no group served at some point: {seen}"
    outages = _outages(seen)
    for group, seconds in outages.items():
        record(f"LWS {groups.executor}", f"rollout: group {group} not serving", seconds)
    assert sorted(outages) == [0, 1], f"each group is replaced once: {outages}"


def _outages(seen: list[tuple[float, set[int]]]) -> dict[int, float]:
    """Seconds each group was out of the Service, from the watcher's samples."""
    out: dict[int, float] = {}
    for (at, ready), (next_at, _) in itertools.pairwise(seen):
        for group in {0, 1} - ready:
            out[group] = out.get(group, 0.0) + next_at - at
    return out
