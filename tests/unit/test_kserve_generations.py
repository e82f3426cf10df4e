"""The InferenceService's generation and the Services KServe keeps across generations.

KServe names the headless Services after the InferenceService's ``metadata.generation``
(``constants.GetHeadServiceName``/``GetWorkerServiceName``, pkg/constants/constants.go) and creates
the new generation's without deleting the old ones (reconcilers/service/service_reconciler.go
``Reconcile``, 0.17.0 to 0.19.0). 0.15.x and 0.16.0 run ``cleanHeadSvc`` after every reconcile: all
head Services of the cluster but the 3 newest go. 0.20.0 deletes every predictor Service but
``<isvc>-predictor`` (components/predictor.go ``reconcileCanaryDeployments``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_local import kserve
from multinode_llm_local.kserve import releases
from multinode_llm_local.kserve.admission import AUTOSCALER, MODE

RENDERED = Path(__file__).with_name("data") / "rendered-multinode.yaml"
KEEPS_OLD = ["0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0"]
CLEANS_HEADS = ["0.15.1", "0.15.2", "0.16.0"]


def rendered(
    name: str = "demo", served: str = "demo", version: str = "0.19.0"
) -> list[dict[str, Any]]:
    """The fixture's runtime and InferenceService for KServe ``version``, the latter named
    ``name`` and serving ``served`` (its spec: a new value is a new generation)."""
    objects = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    isvc = next(o for o in objects if o["kind"] == "InferenceService")
    isvc["metadata"]["name"] = name
    isvc["metadata"]["annotations"][MODE] = releases.get(version).deployment_mode
    del isvc["metadata"]["namespace"]  # the release's
    isvc["spec"]["predictor"]["model"]["args"] = ["--served-model-name", served]
    if name != "demo":  # one cluster-scoped runtime per release
        runtime = next(o for o in objects if o["kind"] == "ClusterServingRuntime")
        runtime["metadata"]["name"] = f"{name}-runtime"
        isvc["spec"]["predictor"]["model"]["runtime"] = f"{name}-runtime"
    return objects


def names(cluster: kserve.Cluster, namespace: str = "default", isvc: str = "demo") -> list[str]:
    return [s.name for s in cluster.services_of(namespace, isvc)]


def expected(version: str, *generations: int, isvc: str = "demo") -> list[str]:
    """What a release makes per generation (kserve-releases.yaml ``controller.services``)."""
    made = releases.get(version).controller.services
    found = [f"{isvc}-predictor"]
    for generation in generations:
        found += [f"{isvc}-head-{generation}"] if "head" in made else []
        found += [f"{isvc}-workers-{generation}"] if "workers" in made else []
    return found


def test_a_spec_change_is_a_new_generation_and_metadata_is_none() -> None:
    cluster = kserve.Cluster(releases.default())
    cluster.apply(rendered(), "demo", "default")
    [first] = cluster.reconcile()
    relabelled = rendered()
    relabelled[1]["metadata"].setdefault("labels", {})["team"] = "other"
    cluster.apply(relabelled, "demo", "default")
    assert cluster.generation("default", "demo") == 1
    cluster.apply(rendered(served="renamed"), "demo", "default")
    assert cluster.generation("default", "demo") == 2
    [second] = cluster.reconcile()
    assert (first.generation, second.generation) == (1, 2)


@pytest.mark.parametrize("version", KEEPS_OLD)
def test_every_older_generations_headless_services_stay(version: str) -> None:
    cluster = kserve.Cluster(releases.get(version))
    for generation, served in enumerate(["a", "b", "c", "d", "e"], start=1):
        cluster.apply(rendered(served=served, version=version), "demo", "default")
        [result] = cluster.reconcile()
        assert result.generation == generation
        assert not result.deleted
    assert names(cluster) == expected(version, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("version", CLEANS_HEADS)
def test_all_but_the_three_newest_head_services_go(version: str) -> None:
    cluster = kserve.Cluster(releases.get(version))
    for served in ["a", "b", "c", "d", "e"]:
        cluster.apply(rendered(served=served, version=version), "demo", "default")
        [result] = cluster.reconcile()
        assert not result.deleted  # the current generation's was just made: the newest
    assert names(cluster) == expected(version, 3, 4, 5)


@pytest.mark.parametrize("version", CLEANS_HEADS)
def test_the_head_service_cleanup_reaches_into_every_namespace(version: str) -> None:
    """Four InferenceServices: the one made first loses its current head Service."""
    cluster = kserve.Cluster(releases.get(version))
    places = [("a", "team-a"), ("b", "team-b"), ("c", "team-c"), ("d", "team-d")]
    for name, namespace in places:
        cluster.apply(rendered(name, name, version), name, namespace)
    results = {r.isvc_name: r for r in cluster.reconcile()}
    assert results["a"].deleted == ["a-head-1"]
    assert [w.name for w in results["a"].workloads] == ["a-predictor", "a-predictor-worker"]
    assert names(cluster, "team-a", "a") == ["a-predictor"]
    for name, namespace in places[1:]:
        assert not results[name].deleted
        assert names(cluster, namespace, name) == expected(version, 1, isvc=name)


def test_0_20_0_deletes_every_service_but_the_predictor_of_every_generation() -> None:
    cluster = kserve.Cluster(releases.get("0.20.0"))
    cluster.apply(rendered(served="a", version="0.20.0"), "demo", "default")
    cluster.reconcile()
    cluster.apply(rendered(served="b", version="0.20.0"), "demo", "default")
    [result] = cluster.reconcile()
    assert result.deleted == ["demo-predictor-worker", "demo-head-2", "demo-workers-2"]
    assert names(cluster) == ["demo-predictor"]


def test_the_services_go_with_the_inference_service() -> None:
    cluster = kserve.Cluster(releases.default())
    cluster.apply(rendered(served="a"), "demo", "default")
    cluster.reconcile()
    other = rendered("other", served="x")
    cluster.apply(copy.deepcopy(other), "other", "default")
    cluster.apply(rendered(served="b"), "demo", "default")
    cluster.reconcile()
    assert names(cluster) == expected("0.19.0", 1, 2)
    cluster.uninstall("demo", "default")
    assert names(cluster) == []
    assert names(cluster, isvc="other") == expected("0.19.0", 1, isvc="other")


@pytest.mark.parametrize("version", [v for v in releases.versions() if releases.get(v).source])
def test_a_runtime_change_reaches_the_pods_only_where_kserve_watches_runtimes(
    version: str,
) -> None:
    """0.16.0+ reconcile the InferenceServices of a runtime whose spec changed (controller.go
    ``servingRuntimeFunc``); 0.15.x has no such watch: the pods keep the runtime KServe last read
    until an event of the InferenceService or of what it owns (``resync``)."""
    cluster = kserve.Cluster(releases.get(version))
    objects = rendered(version=version)
    runtime = next(o for o in objects if o["kind"] in kserve.RUNTIME_KINDS)
    # what 0.15.0's webhooks want besides: the sizes on the runtime, its autoscaler class
    runtime["spec"]["workerSpec"].update(pipelineParallelSize=3, tensorParallelSize=2)
    isvc = next(o for o in objects if o["kind"] == "InferenceService")
    isvc["metadata"]["annotations"][AUTOSCALER] = releases.get(version).autoscaler_class
    cluster.apply(objects, "demo", "default")
    [first] = cluster.reconcile()
    runtime["spec"]["containers"][0]["image"] = "example.com/runtime:new"
    cluster.apply(objects, "demo", "default")
    [second] = cluster.reconcile()
    watches = releases.get(version).controller.watches_runtimes
    assert watches is (not version.startswith("0.15."))
    image = second.head.container["image"]
    assert (image == "example.com/runtime:new") is watches
    assert second.generation == first.generation == 1
    cluster.resync()
    [third] = cluster.reconcile()
    assert third.head.container["image"] == "example.com/runtime:new"
