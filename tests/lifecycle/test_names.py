"""Two teams install release ``llm``, one in team-a and one in team-b.

The old chart named its ClusterServingRuntime (cluster-scoped, and its default scope) after the
release only: both teams render the same object. Under Helm the second install is refused by the
ownership check; under Argo CD the two applications take the one object from each other, and one
team's change rolls the other team's group. Now the runtime is a namespaced ServingRuntime by
default, and a ClusterServingRuntime's name carries the namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from multinode_llm_testing import chartlib

from tests.lifecycle.argo_model import ArgoCD
from tests.lifecycle.charts import render
from tests.lifecycle.cluster import CLUSTER_SCOPED, Doc, FakeCluster, Key, Live
from tests.lifecycle.helm_model import RELEASE_NAMESPACE, Helm, HelmError

TEAMS = ("team-a", "team-b")
CASES = {  # id -> (chart, values)
    "old": ("old", {}),
    "new": ("new", {}),
    "new-cluster-scope": ("new", {"runtime": {"scope": "Cluster"}}),
}


def runtime_of(cluster: FakeCluster, namespace: str) -> Live:
    """The runtime the InferenceService in ``namespace`` gets: KServe looks for a ServingRuntime of
    that name in its namespace, then a ClusterServingRuntime (as the local emulation's
    ``_runtime_for`` does, local/src/multinode_llm_local/kserve)."""
    [isvc] = cluster.of_kind("InferenceService", namespace).values()
    name = isvc.doc["spec"]["predictor"]["model"]["runtime"]
    for key in (
        Key("serving.kserve.io", "ServingRuntime", namespace, name),
        Key("serving.kserve.io", "ClusterServingRuntime", "", name),
    ):
        live = cluster.get(key)
        if live is not None:
            return live
    raise AssertionError(f"no runtime {name} for {namespace}")


def image_of(runtime: Live) -> str:
    image: str = runtime.doc["spec"]["containers"][0]["image"]
    return image


def team_values(values: dict[str, Any], team: str) -> dict[str, Any]:
    """Each team's own runtime image (a tag per team), so whose runtime serves shows."""
    return chartlib.deep_merge(values, {"image": {"tag": f"0.1.0-{team}"}})


@pytest.mark.parametrize("case", CASES)
def test_helm_installs_llm_in_two_namespaces_side_by_side(major: str, case: str) -> None:
    which, values = CASES[case]
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    helm.install("llm", "team-a", render(major, which, values, namespace="team-a"))
    team_b = render(major, which, values, namespace="team-b")
    if which == "old":
        with pytest.raises(HelmError) as refused:
            helm.install("llm", "team-b", team_b)
        message = str(refused.value)
        assert 'ClusterServingRuntime "llm-multinode-llm"' in message
        assert "exists and cannot be imported into the current release" in message
        assert (
            f'key "{RELEASE_NAMESPACE}" must equal "team-b": current value is "team-a"' in message
        )
        assert cluster.of_kind("InferenceService", "team-b") == {}
        return
    helm.install("llm", "team-b", team_b)
    for team in TEAMS:
        runtime = runtime_of(cluster, team)
        assert runtime.annotations[RELEASE_NAMESPACE] == team


@pytest.mark.parametrize("case", CASES)
def test_two_argo_cd_apps_each_keep_their_own_runtime(major: str, case: str) -> None:
    """Apps team-a-llm and team-b-llm (release name llm), each with its own image tag, synced in
    turn. old: team-b's sync takes over the one ClusterServingRuntime (team-a's app now warns of a
    shared resource), and team-a's InferenceService runs team-b's image. new: no shared object."""
    which, values = CASES[case]
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    docs = {t: render(major, which, team_values(values, t), namespace=t) for t in TEAMS}
    for team in TEAMS:
        assert argo.sync(f"{team}-llm", team, docs[team]).phase == "Succeeded"

    warnings = argo.shared_resource_warnings("team-a-llm", "team-a", docs["team-a"])
    images = {t: image_of(runtime_of(cluster, t)) for t in TEAMS}
    if which == "old":
        assert warnings == [
            "ClusterServingRuntime/llm-multinode-llm is part of applications team-a-llm and "
            "team-b-llm"
        ]
        assert images["team-a"].endswith(":0.1.0-team-b")
    else:
        assert warnings == []
        assert {t: i.rsplit(":", 1)[1] for t, i in images.items()} == {
            t: f"0.1.0-{t}" for t in TEAMS
        }


def default_named(path: Path) -> dict[str, Any]:
    """A shipped scenario with the chart's own names (explicit names are the user's to keep
    apart)."""
    values = chartlib.load_values_file(path)
    values.get("runtime", {}).pop("name", None)
    values.get("modelCache", {}).get("storageContainer", {}).pop("name", None)
    return values


def cluster_scoped(docs: list[Doc]) -> set[Key]:
    return {Key.of(d) for d in docs if d["kind"] in CLUSTER_SCOPED}


def on_kserve(scenario: str) -> bool:
    """group.backend=lws has no serving runtime and refuses runtime.scope=Cluster."""
    values = chartlib.load_values_file(chartlib.scenarios()[scenario])
    return bool(values.get("group", {}).get("backend", "kserve") == "kserve")


@pytest.mark.parametrize("scenario", sorted(filter(on_kserve, chartlib.scenarios())))
def test_no_cluster_scoped_object_is_shared_by_two_namespaces(scenario: str) -> None:
    """Every shipped KServe scenario with a ClusterServingRuntime (the scope that renders
    cluster-scoped objects besides the opt-in ClusterStorageContainer): the cluster-scoped objects
    of release llm in team-a and in team-b are distinct objects. Names do not depend on the Helm
    major: helm4."""
    if not chartlib.helm("helm4").exists():
        pytest.skip("helm4 missing: run `bash hack/install-tools.sh`")
    values = chartlib.deep_merge(
        default_named(chartlib.scenarios()[scenario]), {"runtime": {"scope": "Cluster"}}
    )
    a, b = (cluster_scoped(render("helm4", "new", values, namespace=t, base=False)) for t in TEAMS)
    assert a, "no cluster-scoped object rendered: the check checks nothing"
    assert not a & b, sorted(str(k) for k in a & b)
