"""The KServe emulation: the pods and Services KServe's RawDeployment reconciler makes of a
ServingRuntime and a multi-node InferenceService (rules read from KServe's own code)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm.errors import UserError
from multinode_llm_local import kserve
from multinode_llm_local.k8s import env_value, quantity, strategic_merge

RENDERED = Path(__file__).with_name("data") / "rendered-multinode.yaml"


@pytest.fixture
def objects() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RENDERED.read_text()) if doc]


def _isvc(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "InferenceService")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_head_args_are_the_runtime_args_then_the_isvc_args_with_the_name_replaced(
    objects: list[dict[str, Any]],
) -> None:
    head = kserve.reconcile(objects).head.container
    assert head["args"] == ["head", "--model-name=demo", "--served-model-name", "demo"]
    assert head["command"] == ["multinode-llm"]


def test_the_worker_keeps_its_placeholders_as_kserve_does(objects: list[dict[str, Any]]) -> None:
    worker = kserve.reconcile(objects).worker.container
    assert worker["args"] == ["worker", "--name={{.Name}}"]


def test_kserve_injects_the_group_environment_into_head_and_worker(
    objects: list[dict[str, Any]],
) -> None:
    reconciled = kserve.reconcile(objects, generation=4)
    head, worker = _env(reconciled.head.container), _env(reconciled.worker.container)
    assert {
        k: head[k] for k in ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE", "RAY_NODE_COUNT")
    } == {
        "PIPELINE_PARALLEL_SIZE": "3",
        "TENSOR_PARALLEL_SIZE": "2",
        "RAY_NODE_COUNT": "3",
    }
    assert head["REQUEST_GPU_COUNT"] == "2"
    assert head["MODEL_NAME"] == "demo"
    assert head["MODEL_DIR"] == "/mnt/models"
    assert head["INFERENCE_SERVICE_NAME"] == "demo"
    assert head["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert worker["HEAD_SVC"] == "demo-head-4"
    assert worker["WORKER_SVC"] == "demo-workers-4"
    assert worker["ISVC_NAME"] == "demo"
    assert worker["REQUEST_GPU_COUNT"] == "2"
    assert "MODEL_DIR" not in worker


def test_an_isvc_env_var_overrides_the_runtime_one_in_place(objects: list[dict[str, Any]]) -> None:
    head = kserve.reconcile(objects).head.container
    names = [e["name"] for e in head["env"]]
    assert env_value(head["env"], "LOG_LEVEL") == "debug"
    assert names.index("LOG_LEVEL") == 3  # strategic merge keeps the base order


def test_pipeline_parallel_sets_the_node_count_and_worker_replicas(
    objects: list[dict[str, Any]],
) -> None:
    reconciled = kserve.reconcile(objects)
    assert (
        reconciled.node_count,
        reconciled.worker.replicas,
        reconciled.head.replicas,
    ) == (3, 2, 1)
    for workload in (reconciled.head, reconciled.worker):
        resources = workload.container["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == "2"
        assert resources["requests"]["nvidia.com/gpu"] == "2"


def test_a_gpu_limit_without_a_request_makes_kserve_fall_back_to_one_gpu_per_node(
    objects: list[dict[str, Any]],
) -> None:
    """KServe reads GPU *requests* before the API server defaults them: TP x PP nodes of 1 GPU."""
    isvc = _isvc(objects)
    del isvc["spec"]["predictor"]["model"]["resources"]["requests"]["nvidia.com/gpu"]
    del isvc["spec"]["predictor"]["workerSpec"]["containers"][0]["resources"]["requests"]
    reconciled = kserve.reconcile(objects)
    assert (reconciled.node_count, reconciled.head_gpus, reconciled.worker_gpus) == (
        6,
        1,
        1,
    )
    assert reconciled.worker.replicas == 5


def test_the_claim_is_mounted_read_only_at_mnt_models_on_head_and_worker(
    objects: list[dict[str, Any]],
) -> None:
    reconciled = kserve.reconcile(objects)
    for workload in (reconciled.head, reconciled.worker):
        mount = next(
            m for m in workload.container["volumeMounts"] if m["name"] == kserve.PVC_VOLUME
        )
        assert mount == {
            "name": "kserve-pvc-source",
            "mountPath": "/mnt/models",
            "readOnly": True,
            "subPath": "tiny-llama",
        }
        volume = next(v for v in workload.pod_spec["volumes"] if v["name"] == kserve.PVC_VOLUME)
        assert volume["persistentVolumeClaim"] == {"claimName": "models"}


def test_pod_level_security_comes_from_the_isvc_not_the_runtime(
    objects: list[dict[str, Any]],
) -> None:
    reconciled = kserve.reconcile(objects)
    assert reconciled.head.pod_spec["securityContext"]["runAsUser"] == 1000
    assert reconciled.worker.pod_spec["securityContext"]["runAsUser"] == 1000


def test_services_carry_the_generation_in_the_headless_names(objects: list[dict[str, Any]]) -> None:
    services = {s.name: s for s in kserve.reconcile(objects, generation=2).services}
    assert set(services) == {"demo-predictor", "demo-head-2", "demo-workers-2"}
    assert services["demo-predictor"].ports == [(80, 8080)]
    assert services["demo-head-2"].headless
    assert services["demo-head-2"].publish_not_ready
    assert services["demo-workers-2"].selector == {
        "app": "isvc.demo-predictor-worker",
        "isvc.generation": "2",
    }


def test_pod_labels_say_which_isvc_and_role_they_belong_to(objects: list[dict[str, Any]]) -> None:
    reconciled = kserve.reconcile(objects, generation=2)
    assert reconciled.head.labels["app"] == "isvc.demo-predictor"
    assert reconciled.worker.labels["app"] == "isvc.demo-predictor-worker"
    assert reconciled.head.labels["serving.kserve.io/inferenceservice"] == "demo"
    assert reconciled.head.labels["isvc.generation"] == "2"
    assert reconciled.head.labels["team"] == "llm"


def test_predictor_metadata_reaches_both_pods_and_runtime_metadata_its_own_role(
    objects: list[dict[str, Any]],
) -> None:
    """buildObjectMeta / reconcileWorker (components/predictor.go, v0.15.0 .. v0.20.0): the
    predictor's labels and annotations go to head and workers, the runtime's own annotations to the
    head only, its workerSpec's to the workers only; the disallowed list is dropped."""
    isvc, runtime = _isvc(objects), next(o for o in objects if "ServingRuntime" in o["kind"])
    predictor = isvc["spec"]["predictor"]
    predictor["labels"] = {"placement": "rack-a"}
    predictor["annotations"] = {
        "k8s.v1.cni.cncf.io/networks": "ib-net",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    runtime["spec"]["annotations"] = {"head.example.com/only": "yes"}
    runtime["spec"]["workerSpec"]["annotations"] = {"worker.example.com/only": "yes"}
    reconciled = kserve.reconcile(objects)
    for pod in (reconciled.head, reconciled.worker):
        assert pod.labels["placement"] == "rack-a"
        assert pod.annotations["k8s.v1.cni.cncf.io/networks"] == "ib-net"
        assert "kubectl.kubernetes.io/last-applied-configuration" not in pod.annotations
    assert "head.example.com/only" in reconciled.head.annotations
    assert "head.example.com/only" not in reconciled.worker.annotations
    assert "worker.example.com/only" in reconciled.worker.annotations
    assert "worker.example.com/only" not in reconciled.head.annotations


def test_placement_fields_of_predictor_and_workerspec_reach_their_pods(
    objects: list[dict[str, Any]],
) -> None:
    """MergePodSpec takes them from the InferenceService (utils/utils.go, every release)."""
    placement = {
        "priorityClassName": "gpu-high",
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}],
    }
    predictor = _isvc(objects)["spec"]["predictor"]
    predictor.update(copy.deepcopy(placement))
    predictor["workerSpec"].update(copy.deepcopy(placement))
    reconciled = kserve.reconcile(objects)
    for pod in (reconciled.head, reconciled.worker):
        assert {k: pod.pod_spec.get(k) for k in placement} == placement


def test_kserve_adds_a_tcp_readiness_probe_when_the_head_has_none(
    objects: list[dict[str, Any]],
) -> None:
    probe = kserve.reconcile(objects).head.container["readinessProbe"]
    assert probe["tcpSocket"] == {"port": 8080}
    assert probe["periodSeconds"] == 10


def _break(objects: list[dict[str, Any]], change: str) -> None:
    isvc = _isvc(objects)
    predictor = isvc["spec"]["predictor"]
    if change == "two worker containers":
        predictor["workerSpec"]["containers"].append({"name": "sidecar"})
    elif change == "TP in env":
        predictor["model"]["env"].append({"name": "TENSOR_PARALLEL_SIZE", "value": "4"})
    elif change == "unknown GPU":
        predictor["model"]["resources"]["limits"]["example.com/tpu"] = "1"
    elif change == "hf storage":
        predictor["model"]["storageUri"] = "hf://org/model"
    elif change == "hpa":
        isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] = "hpa"
    elif change == "serverless":
        isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "Serverless"
    elif change == "PP 0":
        predictor["workerSpec"]["pipelineParallelSize"] = 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "two worker containers",
            "setting multiple containers in workerSpec is not allowed",
        ),
        (
            "TP in env",
            "setting TENSOR_PARALLEL_SIZE in environment variables is not allowed",
        ),
        ("unknown GPU", "Unknown GPU resource type"),
        ("hf storage", "Multinode only supports 'pvc' and 'oci' Storage Protocol(hf)"),
        ("hpa", "Multinode only supports 'none' autoscaler(hpa)"),
        ("PP 0", "WorkerSpec.PipelineParallelSize cannot be less than 1(0)"),
    ],
)
def test_admission_refuses_what_kserve_refuses(
    objects: list[dict[str, Any]], change: str, message: str
) -> None:
    _break(objects, change)
    with pytest.raises(kserve.Denied, match='the InferenceService "demo" is invalid') as error:
        kserve.reconcile(objects)
    assert message in str(error.value)


def test_a_knative_isvc_is_admitted_but_runs_no_workers(objects: list[dict[str, Any]]) -> None:
    _break(objects, "serverless")
    with pytest.raises(kserve.ReconcileError, match="with its Knative reconciler"):
        kserve.reconcile(objects)


def test_a_custom_gpu_type_declared_in_the_annotation_is_admitted(
    objects: list[dict[str, Any]],
) -> None:
    isvc = _isvc(objects)
    isvc["metadata"]["annotations"]["serving.kserve.io/gpu-resource-types"] = '["example.com/tpu"]'
    isvc["spec"]["predictor"]["model"]["resources"]["limits"]["example.com/tpu"] = "1"
    assert kserve.reconcile(objects).node_count == 3


def test_a_missing_runtime_is_named(objects: list[dict[str, Any]]) -> None:
    _isvc(objects)["spec"]["predictor"]["model"]["runtime"] = "absent"
    with pytest.raises(UserError, match="with the name: absent"):
        kserve.reconcile(objects)


def test_strategic_merge_merges_lists_by_key_and_replaces_the_others() -> None:
    base = {
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "args": ["x"],
        "resources": {"limits": {"cpu": "1"}},
    }
    overlay = {
        "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "9"}],
        "args": ["y"],
        "resources": {"limits": {"memory": "1Gi"}},
    }
    original = copy.deepcopy(base)
    merged = strategic_merge(base, overlay)
    assert merged["env"] == [
        {"name": "A", "value": "9"},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "3"},
    ]
    assert merged["args"] == ["y"]
    assert merged["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}}
    assert base == original


def test_env_value_from_in_the_isvc_replaces_a_runtime_value() -> None:
    runtime = {"name": "kserve-container", "env": [{"name": "A", "value": "1"}]}
    isvc = {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    merged = kserve.controller.merge_containers(runtime, isvc)
    assert merged["env"] == [
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]


@pytest.mark.parametrize(
    ("text", "value"), [("2", 2), ("500m", 0.5), ("3Gi", 3 * 2**30), ("1e3", 1000)]
)
def test_quantities_parse_as_kubernetes_writes_them(text: str, value: float) -> None:
    assert quantity(text, "x") == pytest.approx(value)


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(UserError, match="sizeLimit='lots' is not a Kubernetes quantity"):
        quantity("lots", "sizeLimit")
