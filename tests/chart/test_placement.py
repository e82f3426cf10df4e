"""Placement and network values (docs/placement.md) as KServe makes them.

Every render is real helm 4; what each KServe release does with it is the local emulation
(``multinode_llm_local.kserve``, read from KServe's source at each tag). A value counts only when it
reaches the pod templates of the head and the workers, where the scheduler and the kubelet read it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from multinode_llm_local import kserve
from multinode_llm_local.kserve import controller, releases
from multinode_llm_testing.chartlib import EXAMPLES, install_dry_run, load_values_file, template

SUPPORTED = releases.versions("supported")
PLACEMENT = load_values_file(EXAMPLES / "values-placement-rdma.yaml")
RDMA = "rdma/rdma_shared_device_a"


def group(values: dict[str, Any], version: str) -> kserve.Reconciled:
    """The group KServe ``version`` makes of the chart rendered with ``values``."""
    given = copy.deepcopy(values)
    given.setdefault("kserve", {})["version"] = version
    render = template("helm4", values=given)
    assert render.returncode == 0, render.stderr
    cluster = kserve.Cluster(releases.get(version))
    cluster.apply(render.documents(), "llm", "serving")
    [reconciled] = cluster.reconcile()
    return reconciled


def pods(reconciled: kserve.Reconciled) -> list[controller.Workload]:
    return [reconciled.head, reconciled.worker]


@pytest.fixture(scope="module", params=SUPPORTED)
def placed(request: pytest.FixtureRequest) -> kserve.Reconciled:
    return group(PLACEMENT, request.param)


def test_priority_and_spread_reach_both_pod_templates(placed: kserve.Reconciled) -> None:
    for pod in pods(placed):
        assert pod.pod_spec["priorityClassName"] == "gpu-serving-high", pod.role
        [spread] = pod.pod_spec["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
        assert spread["matchLabelKeys"] == ["isvc.generation"]
        # the chart's default selector (the example sets none) counts the pods of this group:
        # it matches the pod's own labels
        selector = spread["labelSelector"]["matchLabels"]
        assert selector.items() <= pod.labels.items(), pod.role


@pytest.mark.parametrize("version", SUPPORTED)
def test_kserve_drops_its_disallowed_annotations_from_both_pods(version: str) -> None:
    """constants.ServiceAnnotationDisallowedList (pkg/constants/constants.go) at each tag: the
    last-applied configuration on every release, ``modelFormat`` only from v0.17.0."""
    annotations = {
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "modelFormat": "huggingface",
        "example.com/kept": "yes",
    }
    reconciled = group({**PLACEMENT, "inferenceService": {"annotations": annotations}}, version)
    drops_model_format = releases.get(version).minor >= (0, 17)
    for pod in pods(reconciled):
        assert pod.annotations["example.com/kept"] == "yes", pod.role
        assert "kubectl.kubernetes.io/last-applied-configuration" not in pod.annotations
        assert ("modelFormat" in pod.annotations) is not drops_model_format, (version, pod.role)


def test_a_spread_selector_of_ones_own_is_kept_as_written() -> None:
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"team": "llm"}},
    }
    values = {**PLACEMENT, "worker": {**PLACEMENT["worker"], "topologySpreadConstraints": [spread]}}
    reconciled = group(values, releases.default().version)
    assert reconciled.worker.pod_spec["topologySpreadConstraints"] == [spread]


def test_pod_labels_and_annotations_reach_both_pods_from_the_runtime(
    placed: kserve.Reconciled,
) -> None:
    for pod in pods(placed):
        assert pod.labels["team"] == "llm", pod.role
        assert pod.annotations["example.com/owner"] == "llm-platform", pod.role
        assert pod.annotations["k8s.v1.cni.cncf.io/networks"] == "rdma-net", pod.role
    render = template("helm4", values=PLACEMENT)
    isvc = render.one("InferenceService")
    assert "team" not in isvc["metadata"]["labels"]
    assert "k8s.v1.cni.cncf.io/networks" not in isvc["metadata"]["annotations"]


def test_rdma_devices_are_requested_as_themselves_beside_the_gpus(
    placed: kserve.Reconciled,
) -> None:
    """KServe still sets the GPU count on the GPU type and sizes the group by GPUs only."""
    assert placed.node_count == 2
    for pod in pods(placed):
        resources = pod.container["resources"]
        for kind in ("requests", "limits"):
            assert resources[kind]["nvidia.com/gpu"] == "8", (pod.role, kind)
            assert resources[kind][RDMA] == "1", (pod.role, kind)
        env = controller.env_of(pod.container)
        assert env["NCCL_IB_DISABLE"] == "0"
        assert env["NCCL_IB_HCA"] == "mlx5"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        capabilities = pod.container["securityContext"]["capabilities"]
        assert capabilities == {"drop": ["ALL"], "add": ["IPC_LOCK"]}


def test_extra_volumes_are_mounted_beside_the_chart_and_kserve_ones(
    placed: kserve.Reconciled,
) -> None:
    for pod in pods(placed):
        volumes = [v["name"] for v in pod.pod_spec["volumes"]]
        assert volumes == [
            "shm",
            "scratch",
            "compile-cache",
            "ca-bundle",
            controller.PVC_VOLUME,
        ], pod.role
        mounts = {m["mountPath"]: m["name"] for m in pod.container["volumeMounts"]}
        assert mounts["/etc/ssl/internal"] == "ca-bundle"
        assert mounts[controller.MODEL_MOUNT_PATH] == controller.PVC_VOLUME


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_host_network_keeps_service_names_and_drops_the_group_policy(version: str) -> None:
    values = {"model": {"uri": "pvc://models/m"}, "hostNetwork": True}
    for pod in pods(group(values, version)):
        assert pod.pod_spec["hostNetwork"] is True, pod.role
        assert pod.pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet", pod.role
    policies = template("helm4", values=values).of_kind("NetworkPolicy")
    assert [p["metadata"]["name"] for p in policies] == ["llm-multinode-llm-no-ingress"]


def test_the_notes_warn_about_the_host_network_and_a_non_root_ipc_lock(helm4: str) -> None:
    values = {
        "model": {"uri": "pvc://models/m"},
        "hostNetwork": True,
        "rdma": {"enabled": True, "resources": {RDMA: 1}, "ipcLock": True},
    }
    notes = install_dry_run(helm4, values=values).stdout
    assert "NetworkPolicy does not\napply to them" in notes
    assert "6380-6385" in notes
    assert "10002-10100" in notes
    assert "kubernetes#56374" in notes


def test_without_the_values_nothing_of_them_is_rendered() -> None:
    render = template("helm4", values={"model": {"uri": "pvc://models/m"}})
    predictor = render.one("InferenceService")["spec"]["predictor"]
    for field in ("labels", "annotations", "priorityClassName", "hostNetwork"):
        assert field not in predictor
        assert field not in predictor["workerSpec"]
    runtime = render.one("ServingRuntime")["spec"]
    for container in (runtime["containers"][0], runtime["workerSpec"]["containers"][0]):
        assert "add" not in container["securityContext"]["capabilities"]
        assert "NCCL_IB_DISABLE" not in {e["name"] for e in container["env"]}
