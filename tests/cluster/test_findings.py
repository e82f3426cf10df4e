"""What a KServe source audit found that no model showed, proven on real KServe (the chart's
default release): what KServe cannot host, which the chart refuses at ``helm template`` time
(tests/chart/test_refusals.py: "name and namespace past a DNS label", "name ending in
-predictor"), and the cluster settings the chart now overrides.

Each test applies the chart's own objects (rendered for a release name that renders, then renamed
by hand the way a longer release name would name them) with their pods pinned to no node: what is
read is what KServe's controller makes of them, and no group needs to run.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from realcluster import (
    CHART,
    TOOLS,
    Clusters,
    Obj,
    RealCluster,
    events,
    render_pending,
    wait_for,
    with_namespace,
)

NAMESPACE = "audit-long-namespace"  # 20 characters
DNS_LABEL = 63
PREDICTOR = "-predictor-"


@pytest.fixture(scope="module")
def cluster(clusters: Clusters) -> Iterator[RealCluster]:
    with with_namespace(clusters, NAMESPACE) as running:
        yield running


def _renamed(objects: list[Obj], name: str) -> list[Obj]:
    """The objects of a render, the InferenceService (and its runtime) named ``name``."""
    renamed = copy.deepcopy(objects)
    for obj in renamed:
        if obj["kind"] == "InferenceService":
            obj["metadata"]["name"] = name
            obj["spec"]["predictor"]["model"]["runtime"] = name
        else:
            obj["metadata"]["name"] = name
    return renamed


def _apply(cluster: RealCluster, objects: list[Obj]) -> None:
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", "-",
                    stdin=yaml.safe_dump_all(objects))  # fmt: skip


def _deployments(cluster: RealCluster, isvc: str) -> set[str]:
    found = cluster.items("deployments", "-n", NAMESPACE, "-l",
                          f"serving.kserve.io/inferenceservice={isvc}")  # fmt: skip
    return {d["metadata"]["name"] for d in found}


def test_kserve_hosts_a_name_whose_predictor_host_is_63_characters_and_not_64(
    cluster: RealCluster,
) -> None:
    """The raw reconciler's host is ``<isvc>-predictor-<namespace>`` (the default domainTemplate)
    and must be a DNS label (ingress/domain.go GenerateDomainName, kserve#4807): one character
    more and KServe fails every reconcile and creates no Deployment."""
    objects = render_pending("audit", NAMESPACE, cluster.kserve)
    fits = "f" * (DNS_LABEL - len(PREDICTOR) - len(NAMESPACE))
    too_long = "t" * (len(fits) + 1)
    _apply(cluster, _renamed(objects, fits))
    _apply(cluster, _renamed(objects, too_long))
    wait_for(lambda: _deployments(cluster, fits), 120, f"KServe to create {fits}'s Deployments")
    wait_for(
        lambda: any("invalid domain name" in e for e in events(cluster, NAMESPACE, too_long)),
        120,
        f"KServe to refuse the host of {too_long}",
    )
    assert _deployments(cluster, too_long) == set()


def test_a_name_ending_in_predictor_gives_workers_a_head_service_that_does_not_exist(
    cluster: RealCluster,
) -> None:
    """KServe gives the workers ``HEAD_SVC = GetHeadServiceName(isvc.Name)`` and names the head
    Service ``GetHeadServiceName(isvc.Name + "-predictor")``, and GetHeadServiceName trims one
    ``-predictor`` (constants.go, components/predictor.go, service_reconciler.go): for a name
    that ends in ``-predictor`` the two differ, so the workers never find their head."""
    objects = render_pending("audit", NAMESPACE, cluster.kserve)
    name = "suffix-predictor"
    _apply(cluster, _renamed(objects, name))
    wait_for(lambda: len(_deployments(cluster, name)) == 2, 120, f"{name}'s Deployments")
    worker = cluster.get("-n", NAMESPACE, f"deployment/{name}-predictor-worker")
    env = {
        e["name"]: e.get("value")
        for c in worker["spec"]["template"]["spec"]["containers"]
        for e in c.get("env") or []
    }
    services = {s["metadata"]["name"] for s in cluster.items("services", "-n", NAMESPACE)}
    assert env["HEAD_SVC"] not in services, (env["HEAD_SVC"], sorted(services))
    assert f"{name}-head-1" in services


def test_metrics_scraping_configured_on_the_cluster_cannot_point_prometheus_at_nothing(
    cluster: RealCluster,
) -> None:
    """With KServe's ``metricsAggregator.enablePrometheusScraping: "true"``, its pod webhook
    annotates every pod ``prometheus.io/port: "9091"`` (queue-proxy's port;
    metrics_aggregate_injector.go) unless the pod says otherwise, and nothing of the group listens
    there. The chart says otherwise."""
    config = cluster.get("-n", "kserve", "configmap/inferenceservice-config")
    aggregator = json.loads(config["data"]["metricsAggregator"])
    patched = {**aggregator, "enablePrometheusScraping": "true"}
    patch = {"data": {"metricsAggregator": json.dumps(patched)}}
    cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                    "--type", "merge", "-p", json.dumps(patch))  # fmt: skip
    try:
        objects = render_pending("scrape", NAMESPACE, cluster.kserve)
        name = "scrape-multinode-llm"
        _apply(cluster, objects)
        pods = wait_for_pods(cluster, name)
        for pod in pods:
            annotations = pod["metadata"].get("annotations") or {}
            assert annotations.get("prometheus.io/port") != "9091", annotations
    finally:
        restore = {"data": {"metricsAggregator": json.dumps(aggregator)}}
        cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                        "--type", "merge", "-p", json.dumps(restore))  # fmt: skip


def wait_for_pods(cluster: RealCluster, isvc: str) -> list[Obj]:
    def both() -> list[Obj]:
        found = cluster.items("pods", "-n", NAMESPACE, "-l",
                              f"serving.kserve.io/inferenceservice={isvc}")  # fmt: skip
        return found if len(found) == 2 else []

    wait_for(both, 120, f"the two pods of {isvc}")
    return both()


def test_a_headless_predictor_service_leaves_the_readiness_job_its_second_url(
    cluster: RealCluster,
) -> None:
    """KServe's ``service.serviceClusterIPNone: true`` makes the predictor Service headless
    (service_reconciler.go): its name then resolves to the head pod, where port 80 is closed and the
    head listens on 8080. The readiness Job asks port 80, then 8080 (await-group takes the first
    that answers; tests/unit/test_await_group.py)."""
    config = cluster.get("-n", "kserve", "configmap/inferenceservice-config")
    service = json.loads(config["data"].get("service") or "{}")
    headless = {"data": {"service": json.dumps({**service, "serviceClusterIPNone": True})}}
    cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                    "--type", "merge", "-p", json.dumps(headless))  # fmt: skip
    try:
        name = "headless-multinode-llm"
        _apply(cluster, render_pending("headless", NAMESPACE, cluster.kserve))
        predictor = f"{name}-predictor"
        wait_for(lambda: _service(cluster, predictor), 120, f"KServe to create {predictor}")
        found = _service(cluster, predictor)
        assert found is not None
        spec = found["spec"]
        assert spec["clusterIP"] == "None"
        first = spec["ports"][0]
        assert (first["port"], first["targetPort"]) == (80, 8080)
        job = next(
            d
            for d in yaml.safe_load_all(_render_job("headless"))
            if d and d.get("kind") == "Job" and "-ready-" in d["metadata"]["name"]
        )
        urls = job["spec"]["template"]["spec"]["containers"][0]["args"][1:3]
        assert urls[1] == f"{urls[0]}:8080"
    finally:
        restore = {"data": {"service": json.dumps(service)}}
        cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                        "--type", "merge", "-p", json.dumps(restore))  # fmt: skip


def _service(cluster: RealCluster, name: str) -> Obj | None:
    found = [s for s in cluster.items("services", "-n", NAMESPACE) if s["metadata"]["name"] == name]
    return found[0] if found else None


def _render_job(release: str) -> str:
    return subprocess.run(
        [str(TOOLS / "helm4"), "template", release, str(CHART), "--namespace", NAMESPACE,
         "--set", "model.uri=pvc://models/tiny-llama"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def test_an_upgrade_rolls_the_group_once_when_kserve_reconciles_between_helms_applies(
    cluster: RealCluster,
) -> None:
    """Helm applies the kinds it does not know in alphabetical order: the InferenceService, then
    the ServingRuntime (kind_sorter.go). Here the same two applies, in that order, with KServe's
    reconcile of the first one finished before the second: the group's head rolls once, to the
    new spec. (With a runtime named the same across specs KServe rolled it twice: first with the
    new InferenceService and the old runtime, then with the new runtime.)"""
    release, isvc = "order", "order-multinode-llm"
    _apply(cluster, render_pending(release, NAMESPACE, cluster.kserve))
    wait_for(lambda: len(_deployments(cluster, isvc)) == 2, 120, f"{isvc}'s Deployments")
    before = _head_replica_sets(cluster, isvc)
    after = render_pending(
        release, NAMESPACE, cluster.kserve, "image.tag=0.1.0-rc1",
        "vllm.args={--max-model-len=256,--max-num-seqs=8}",
    )  # fmt: skip
    spec = _group_spec(after)
    _apply(cluster, [o for o in after if o["kind"] == "InferenceService"])
    wait_for(
        lambda: _head_replica_sets(cluster, isvc) != before or _missing_runtime(cluster, isvc),
        120,
        "KServe to reconcile the new InferenceService before the runtime is applied",
    )
    _apply(cluster, [o for o in after if o["kind"] != "InferenceService"])
    wait_for(lambda: _head_spec(cluster, isvc) == spec, 120, "the head Deployment's new spec")
    rolled = _head_replica_sets(cluster, isvc) - before
    assert len(rolled) == 1, f"the head rolled {len(rolled)} times: {sorted(rolled)}"


def _head_replica_sets(cluster: RealCluster, isvc: str) -> set[str]:
    found = cluster.items("replicasets", "-n", NAMESPACE)
    return {
        rs["metadata"]["name"]
        for rs in found
        if any(
            o["name"] == f"{isvc}-predictor" for o in rs["metadata"].get("ownerReferences") or []
        )
    }


def _missing_runtime(cluster: RealCluster, isvc: str) -> bool:
    return any("No ServingRuntimes" in e for e in events(cluster, NAMESPACE, isvc))


def _group_spec(objects: list[Obj]) -> str:
    runtime = next(o for o in objects if o["kind"].endswith("ServingRuntime"))
    env = runtime["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "MULTINODE_LLM_GROUP_SPEC"))


def _head_spec(cluster: RealCluster, isvc: str) -> str:
    head = cluster.get("-n", NAMESPACE, f"deployment/{isvc}-predictor")
    container = head["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
    return str(env.get("MULTINODE_LLM_GROUP_SPEC", ""))
