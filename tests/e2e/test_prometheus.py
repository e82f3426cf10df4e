"""A real Prometheus scrapes a PP=2 TP=1 group through the chart's PodMonitor and evaluates the
chart's PrometheusRule: the targets, the series, and MultinodeLLMGroupDegraded firing when the
worker is killed and resolving once the group serves again.

One group serves the whole module (a start costs about a minute); the kill comes last.
``prometheus.py`` says how the PodMonitor becomes Prometheus's config here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prometheus
import pytest
from groups import LocalGroup, chat_once, local_group, record, serves_now
from multinode_llm_local import cluster
from multinode_llm_local.chart import find_chart
from multinode_llm_local.pods import ContainerPlan, PodPlan
from multinode_llm_local.state import ClusterPlan, Forward
from multinode_llm_testing.networks import PROMETHEUS_E2E

SCENARIO = "Prometheus PP=2 TP=1"
ALERT = "MultinodeLLMGroupDegraded"
FIRING = f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}'
HEAD_NOT_READY = 'multinode_llm_probe_ok{role="head", probe="ready"} == 0'
# The chart's monitoring objects, with the alert's `for:` short enough to watch it fire here.
MONITORING = (
    "monitoring.podMonitor.enabled=true",
    "monitoring.podMonitor.interval=1s",
    "monitoring.rules.enabled=true",
    "monitoring.rules.groupDegradedFor=5s",
)
# What the PodMonitor must select (docs/monitoring.md): vLLM's port on the head, the supervisors'
# status port on every pod.
EXPECTED_ENDPOINTS = {("head", "http"), ("head", "status"), ("worker", "status")}
INTERVAL_S = 1.0  # prometheus.INTERVAL: a resolved alert has no sample from the next evaluation
TARGETS_S = 120
ALERT_S = 120
RECOVERY_S = 600


@dataclass
class Monitored:
    group: LocalGroup
    prometheus: prometheus.Prometheus

    def sync(self) -> None:
        """Refresh the discovery file from the kubelet's status (what kubernetes_sd watches)."""
        plan = self.group.state.load_plan()
        assert plan is not None
        self.prometheus.sync_targets(plan, self.group.status())

    def roles_by_pod(self) -> dict[str, str]:
        return {pod["name"]: pod["role"] for pod in self.group.status()["pods"]}

    def up_targets(self) -> set[tuple[str, str]]:
        """(role, endpoint) of every active target whose last scrape succeeded."""
        self.sync()
        roles = self.roles_by_pod()
        return {
            (roles.get(t["labels"].get("pod", ""), "?"), t["labels"].get("endpoint", ""))
            for t in self.prometheus.targets()
            if t["health"] == "up"
        }

    def fired_since(self, since: float) -> list[dict[str, Any]]:
        """The alert's firing series since ``since`` (epoch seconds), each once."""
        self.sync()
        window = max(1, int(time.time() - since) + 1)
        return self.prometheus.query(f"max_over_time({FIRING}[{window}s])")

    def quiet(self) -> bool:
        """The alert is neither firing nor pending."""
        self.sync()
        return not self.prometheus.alerts(ALERT)


def _pod(name: str, isvc: str, role: str, ip: str, ports: dict[str, int]) -> PodPlan:
    """A pod as the local cluster plans it, labelled as KServe labels a group's pods."""
    labels = {"serving.kserve.io/inferenceservice": isvc, "component": "predictor"}
    if role == "cache":
        labels = {
            "app.kubernetes.io/name": "multinode-llm",
            "app.kubernetes.io/component": "model-cache",
        }
    container = ContainerPlan(
        name=f"{role}-container",
        argv=[],
        env={},
        workdir="/",
        uid=1000,
        gid=1000,
        groups=[],
        no_new_privs=True,
        drop_capabilities=True,
        read_only_root=True,
        mounts=[],
        ports=ports,
    )
    return PodPlan(
        name=name,
        namespace="default",
        role=role,
        netns="",
        ip=ip,
        labels=labels,
        containers=[container],
        grace=30,
        gpus=1,
        directory="/",
    )


def test_the_podmonitor_selects_the_groups_ports_and_nothing_else() -> None:
    """Without a group (seconds, no root): Prometheus, given the chart's PodMonitor, keeps the
    head's two ports and the worker's status port of this release, and leaves another release's
    head and a cache pod alone. Nothing listens at these addresses; only discovery is checked."""
    reason = prometheus.prerequisites(group=False)
    if reason:
        pytest.skip(reason)
    objects = cluster.render(find_chart(), [cluster.DEFAULT_VALUES], MONITORING, "local", "default")
    [isvc] = [o["metadata"]["name"] for o in objects if o["kind"] == "InferenceService"]
    pods = [
        _pod("head", isvc, "head", "127.0.0.1", {"http": 18080, "status": 18081}),
        _pod("worker", isvc, "worker", "127.0.0.2", {"status": 18081}),
        _pod("other", "other-multinode-llm", "head", "127.0.0.3", {"http": 18080, "status": 18081}),
        _pod("cache", isvc, "cache", "127.0.0.4", {"http": 18090}),
    ]
    plan = ClusterPlan(
        prefix=PROMETHEUS_E2E.prefix,
        subnet="",
        release="local",
        namespace="default",
        isvc=isvc,
        pods=pods,
        forward=Forward(host="127.0.0.1", port=1, service="", role="head", target_port=8080),
    )
    status = {"pods": [{"name": p.name, "phase": "Running", "ready": True} for p in pods]}
    monitors, rules = prometheus.monitoring_objects(objects)
    with prometheus.running(monitors, rules, plan, status) as running:
        deadline = time.monotonic() + TARGETS_S
        while len(running.targets()) < len(EXPECTED_ENDPOINTS) and time.monotonic() < deadline:
            time.sleep(0.2)
        labels = [t["labels"] for t in running.targets()]
    assert {(t["pod"], t["endpoint"]) for t in labels} == EXPECTED_ENDPOINTS, labels
    for each in labels:
        assert (each["namespace"], each["inferenceservice"], each["job"]) == (
            "default",
            isvc,
            isvc,
        ), each
        assert each["container"] == f"{each['pod']}-container", each


@pytest.fixture(scope="module")
def monitored(tiny_model: Path) -> Iterator[Monitored]:
    reason = prometheus.prerequisites()
    if reason:
        pytest.skip(reason)
    with local_group(SCENARIO, tiny_model, sets=MONITORING) as group:
        objects = cluster.render(
            find_chart(),
            [cluster.DEFAULT_VALUES],
            MONITORING,
            group.plan.release,
            group.plan.namespace,
        )
        monitors, rules = prometheus.monitoring_objects(objects)
        assert monitors, "the chart rendered no PodMonitor with monitoring.podMonitor.enabled"
        assert rules, "the chart rendered no PrometheusRule with monitoring.rules.enabled"
        with prometheus.running(monitors, rules, group.plan, group.status()) as running:
            yield Monitored(group, running)


def test_every_target_the_podmonitor_selects_is_up(monitored: Monitored) -> None:
    seen: set[tuple[str, str]] = set()

    def all_up() -> bool:
        seen.clear()
        seen.update(monitored.up_targets())
        return seen == EXPECTED_ENDPOINTS

    try:
        took = monitored.group.wait(all_up, TARGETS_S, f"targets {sorted(EXPECTED_ENDPOINTS)} up")
    except AssertionError as error:
        raise AssertionError(f"{error}; up at the end: {sorted(seen)}") from None
    record(SCENARIO, "Prometheus started -> every target up", took)
    labels = [t["labels"] for t in monitored.prometheus.targets()]
    assert len(labels) == len(EXPECTED_ENDPOINTS), labels  # nothing else selected
    isvc = monitored.group.plan.isvc
    for each in labels:
        assert each["namespace"] == monitored.group.plan.namespace, each
        assert each["inferenceservice"] == isvc, each
        assert each["container"] in ("kserve-container", "worker-container"), each


def _values(monitored: Monitored, expression: str) -> dict[str, float]:
    """pod name -> value of each series of ``expression`` now."""
    return {
        r["metric"].get("pod", ""): float(r["value"][1])
        for r in monitored.prometheus.query(expression)
    }


def test_vllm_and_group_metrics_reach_prometheus(monitored: Monitored) -> None:
    head = monitored.group.pod("head")["name"]
    worker = monitored.group.pod("worker")["name"]
    vllm = monitored.prometheus.query('count by (pod) ({__name__=~"vllm:.+", endpoint="http"})')
    assert [r["metric"]["pod"] for r in vllm] == [head], vllm
    nodes = 'multinode_llm_group_nodes{endpoint="status"}'
    monitored.group.wait(
        lambda: _values(monitored, nodes) == {head: 2.0}, 30, "the head's group_nodes at 2"
    )
    expected = _values(monitored, 'multinode_llm_group_nodes_expected{endpoint="status"}')
    assert expected == {head: 2.0}
    ready = _values(monitored, 'multinode_llm_probe_ok{probe="ready", endpoint="status"}')
    assert ready == {head: 1.0, worker: 1.0}
    engine = _values(monitored, 'multinode_llm_engine_ready{endpoint="status"}')
    assert engine == {head: 1.0}
    joined = _values(monitored, 'multinode_llm_worker_joined{endpoint="status"}')
    assert joined == {worker: 1.0}


def test_group_degraded_is_quiet_while_the_group_serves(monitored: Monitored) -> None:
    groups = monitored.prometheus.api("rules", type="alert")["groups"]
    [rule] = [r for g in groups for r in g["rules"] if r["name"] == ALERT]
    assert rule["health"] == "ok", rule  # evaluated without error, so "quiet" means something
    assert serves_now(monitored.group)
    assert monitored.quiet(), monitored.prometheus.alerts(ALERT)


def test_a_killed_worker_fires_group_degraded_and_it_resolves_once_healed(
    monitored: Monitored,
) -> None:
    """The alert fires after the kill (seen in its ALERTS series, so a short firing is not missed
    between polls), keeps firing until the head is Ready again, and is neither firing nor pending
    once the group serves. The times come from Prometheus's own evaluations."""
    group = monitored.group
    killed = group.kill("worker")
    group.wait(lambda: bool(monitored.fired_since(killed)), ALERT_S, f"{ALERT} to fire")
    for series in monitored.fired_since(killed):
        assert series["metric"]["inferenceservice"] == group.plan.isvc, series
        print(f"{ALERT} fired for {series['metric']}")
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready again",
    )
    group.wait(lambda: _chats(group), 120, "a chat completion to succeed")
    healed = time.time()
    group.wait(monitored.quiet, ALERT_S, f"{ALERT} to resolve")
    firing = monitored.prometheus.samples(FIRING, killed, time.time())
    first, resolved = firing[0] - killed, firing[-1] + INTERVAL_S - killed
    # Resolved only once the head is Ready again (the restarted head re-forming the group is
    # still the degraded group), not when its new supervisor first answers.
    not_ready = monitored.prometheus.samples(HEAD_NOT_READY, killed, time.time())
    assert not_ready, "the head never reported not Ready after the kill"
    assert firing[-1] + 2 * INTERVAL_S >= not_ready[-1], (
        f"{ALERT} resolved {not_ready[-1] - firing[-1]:.1f} s before the head was Ready again"
    )
    print(
        f"{ALERT}: fired {first:.1f} s after the kill, resolved at {resolved:.1f} s; "
        f"serving again at {healed - killed:.1f} s"
    )
    record(SCENARIO, f"killed worker -> {ALERT} firing", first)
    record(SCENARIO, f"killed worker -> {ALERT} resolved", resolved)
    record(SCENARIO, "killed worker -> serving again (chat)", healed - killed)


def _chats(group: LocalGroup) -> bool:
    """One chat completion through the head's Service succeeds now."""
    import openai

    try:
        chat_once(group)
    except openai.OpenAIError:
        return False
    return True
