"""What KServe's InferenceService controller makes of a multi-node InferenceService, per release.

A re-telling of KServe's Go code at each release tag (v0.15.0 .. v0.20.0), so that the local cluster
runs the pods a real cluster would run. What differs between releases comes from the release's
entry in the chart's ``kserve-releases.yaml`` (``Release.controller``). Each function names the
KServe function it follows (paths under ``pkg/controller/v1beta1/inferenceservice/``):

- mode: ``utils/utils.go`` ``GetDeploymentMode`` (status first, then the annotation, then the
  configured default, ``Serverless``); only the raw mode is run here
- runtime: ``components/predictor.go`` ``reconcileModel`` (a named runtime must exist, be enabled
  and list the model's format; ``RuntimeSupportsModel`` ignores autoSelect for a named runtime)
- head pod: ``buildPodSpec`` / ``utils.MergeServingRuntimeAndInferenceServiceSpecs``: the runtime's
  ``kserve-container`` merged with the model container (strategic merge, args concatenated), then
  ``ReplacePlaceholders`` (a Go template over the container's JSON, ``gotemplate.py``)
- worker pod: ``multiNodeProcess``: ``worker-container`` merged the same way, never templated
- nodes and GPUs: ``computeRayNodeAndGPUs`` (0.15.1+, GPU requests only), ``computeMpNodeAndGPUs``
  (0.18+, ``multinode/executor-backend: mp``); 0.15.0 gives every pod TENSOR_PARALLEL_SIZE GPUs
- environment: ``multiNodeProcess`` sets exactly the names the table lists per release
- Deployments: ``reconcilers/deployment/deployment_reconciler.go`` ``createRawDeployment``,
  ``addGPUResourceToDeployment``, ``setDefaultPodSpec``, ``setDefaultDeploymentSpec``
- Services: ``reconcilers/service/service_reconciler.go`` ``createService``
- pod mutator for ``pvc://``: ``pkg/webhook/admission/pod/storage_initializer_injector.go``
- 0.20.0: ``reconcileCanaryDeployments`` deletes every predictor Deployment and Service not named
  ``<isvc>-predictor`` (``Reconciled.deleted``)
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local.k8s import Obj, env_value, quantity, set_env, strategic_merge
from multinode_llm_local.kserve import gotemplate
from multinode_llm_local.kserve.admission import (
    AUTOSCALER,
    GPU_TYPES,
    KSERVE_DEFAULT_GPU_TYPES,
    LEGACY_MODES,
    MODE,
    gpu_resource_types,
)
from multinode_llm_local.kserve.releases import Release

HEAD_CONTAINER = "kserve-container"
WORKER_CONTAINER = "worker-container"
MODEL_MOUNT_PATH = "/mnt/models"
PVC_VOLUME = "kserve-pvc-source"
GENERATION_LABEL = "isvc.generation"
ROLE_LABEL = "multinode/role"
EXECUTOR_ANNOTATION = "multinode/executor-backend"
PROGRESS_DEADLINE_S = 600  # setDefaultDeploymentSpec, every release
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
AGGREGATION_ANNOTATION = "serving.kserve.io/enable-metric-aggregation"
SCRAPING_ANNOTATION = "serving.kserve.io/enable-prometheus-scraping"
METRICS_AGGREGATOR_DEFAULTS = {AGGREGATION_ANNOTATION: "false", SCRAPING_ANNOTATION: "false"}
QUEUE_PROXY_PROMETHEUS_PORT = "9091"
# constants.ServiceAnnotationDisallowedList (pkg/constants/constants.go): what the predictor
# drops from runtime, ISVC and predictor annotations; "modelFormat" from v0.17.0.
DISALLOWED_ANNOTATIONS = frozenset(
    {
        "autoscaling.knative.dev/min-scale",
        "autoscaling.knative.dev/max-scale",
        SOURCE_URI_ANNOTATION,
        "kubectl.kubernetes.io/last-applied-configuration",
        "modelFormat",
    }
)
# The ServingRuntime pod-level fields MergePodSpec takes; everything else there is dropped.
_RUNTIME_POD_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "volumes",
    "imagePullSecrets",
    "schedulerName",
    "resourceClaims",
)
# corev1.PodSpec's fields: what the ISVC predictor / workerSpec carry inline besides their own.
_POD_SPEC_FIELDS = frozenset(
    (  # noqa: SIM905 - forty names read best as words
        "volumes initContainers containers ephemeralContainers restartPolicy "
        "terminationGracePeriodSeconds activeDeadlineSeconds dnsPolicy nodeSelector "
        "serviceAccountName serviceAccount automountServiceAccountToken nodeName hostNetwork "
        "hostPID hostIPC shareProcessNamespace securityContext imagePullSecrets hostname "
        "subdomain affinity schedulerName tolerations hostAliases priorityClassName priority "
        "dnsConfig readinessGates runtimeClassName enableServiceLinks preemptionPolicy overhead "
        "topologySpreadConstraints setHostnameAsFQDN os hostUsers schedulingGates "
        "resourceClaims resources "
    ).split()
)
# ModelSpec fields that are not the inline container.
_MODEL_FIELDS = frozenset(
    {"modelFormat", "runtime", "runtimeVersion", "protocolVersion", "storageUri", "storage"}
)


class ReconcileError(UserError):
    """The controller cannot make the group; ``str()`` is KServe's message."""


@dataclass(frozen=True)
class Workload:
    """One Deployment KServe creates: its name, replica count and pod template."""

    name: str
    role: str  # "head" or "worker"
    replicas: int
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_spec: Obj
    strategy: Obj = field(default_factory=dict)
    progress_deadline_s: int = PROGRESS_DEADLINE_S

    @property
    def container(self) -> Obj:
        """The serving container (``kserve-container`` / ``worker-container``)."""
        wanted = HEAD_CONTAINER if self.role == "head" else WORKER_CONTAINER
        return next(c for c in self.pod_spec["containers"] if c["name"] == wanted)


@dataclass(frozen=True)
class Service:
    """One Service KServe creates; headless ones resolve to pod IPs."""

    name: str
    selector: dict[str, str]
    headless: bool
    publish_not_ready: bool = False
    ports: list[tuple[int, int]] = field(default_factory=list)  # (port, targetPort)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reconciled:
    """Everything KServe derives from one InferenceService and its runtime."""

    isvc_name: str
    namespace: str
    generation: int
    storage_uri: str
    head: Workload
    worker: Workload
    services: list[Service]
    node_count: int
    head_gpus: int
    worker_gpus: int
    deleted: list[str] = field(default_factory=list)  # what the controller deletes right after

    @property
    def running_services(self) -> list[Service]:
        return [s for s in self.services if s.name not in self.deleted]

    @property
    def workloads(self) -> list[Workload]:
        """The Deployments that survive the reconcile, head first."""
        return [w for w in (self.head, self.worker) if w.name not in self.deleted]


def reconcile(release: Release, isvc: Obj, runtime: Obj, generation: int = 1) -> Reconciled:
    """The Deployments and Services for one multi-node InferenceService (already admitted)."""
    name = isvc["metadata"]["name"]
    namespace = isvc["metadata"].get("namespace", "default")
    annotations: dict[str, str] = dict(isvc["metadata"].get("annotations") or {})
    predictor: Obj = (isvc.get("spec") or {}).get("predictor") or {}
    model: Obj = predictor.get("model") or {}
    _require_raw_mode(release, isvc)
    runtime_spec = _usable_runtime(runtime, model, name)

    head_spec = _head_pod_spec(release, runtime_spec, predictor, model, isvc)
    worker_spec, pipeline, tensor = _worker_pod_spec(release, runtime_spec, predictor)
    nodes, head_gpus, worker_gpus = _nodes_and_gpus(
        release, runtime, head_spec, worker_spec, pipeline, tensor
    )
    storage_uri = str(model["storageUri"])
    sizes = {
        "pipeline": pipeline,
        "tensor": tensor,
        "nodes": nodes,
        "head_gpus": head_gpus,
        "worker_gpus": worker_gpus,
    }
    _inject_env(release, head_spec, worker_spec, isvc, storage_uri, generation, sizes)

    labels = _labels(runtime_spec.get("labels"), isvc, predictor)
    labels[GENERATION_LABEL] = str(generation)
    worker_labels = _labels((runtime_spec.get("workerSpec") or {}).get("labels"), isvc, predictor)
    worker_labels[GENERATION_LABEL] = str(generation)
    head_annotations, worker_annotations = _pod_annotations(release, runtime_spec, isvc, predictor)
    head_annotations[SOURCE_URI_ANNOTATION] = worker_annotations[SOURCE_URI_ANNOTATION] = (
        storage_uri
    )
    read_only = annotations.get("storage.kserve.io/readonly", "true") != "false"
    for spec in (head_spec, worker_spec):
        mount_pvc(spec, storage_uri, read_only)
        set_default_pod_spec(spec)
    for pod_annotations in (head_annotations, worker_annotations):
        inject_metrics_annotations(pod_annotations)
    head_types = _reconciler_gpu_types(release, annotations, head_annotations)
    worker_types = _reconciler_gpu_types(release, annotations, worker_annotations)
    _set_gpu_resources(head_spec, HEAD_CONTAINER, head_gpus, head_types)
    _set_gpu_resources(worker_spec, WORKER_CONTAINER, worker_gpus, worker_types)

    head_name, worker_name = f"{name}-predictor", f"{name}-predictor-worker"
    strategy = copy.deepcopy(predictor.get("deploymentStrategy") or {})
    head = Workload(
        name=head_name,
        role="head",
        replicas=_head_replicas(release, predictor, annotations),
        labels={**labels, "app": f"isvc.{head_name}"},
        annotations=head_annotations,
        pod_spec=head_spec,
        strategy=_deployment_strategy(strategy, worker=False),
    )
    worker = Workload(
        name=worker_name,
        role="worker",
        replicas=nodes - 1,
        labels={**worker_labels, "app": f"isvc.{worker_name}"},
        annotations=worker_annotations,
        pod_spec=worker_spec,
        strategy=_deployment_strategy(strategy, worker=True),
    )
    services = _services(release, head, worker, name, generation)
    deleted = []
    if release.controller.deletes_workers:  # 0.20.0: reconcileCanaryDeployments' cleanup
        deleted = [worker.name] + [s.name for s in services if s.name != head_name]
    return Reconciled(
        isvc_name=name,
        namespace=namespace,
        generation=generation,
        storage_uri=storage_uri,
        head=head,
        worker=worker,
        services=services,
        node_count=nodes,
        head_gpus=head_gpus,
        worker_gpus=worker_gpus,
        deleted=deleted,
    )


def compute_nodes(
    release: Release,
    *,
    tensor: int,
    pipeline: int,
    head_gpus: int,
    worker_gpus: int,
    executor: str = "ray",
) -> tuple[int, int, int]:
    """(nodes, head GPUs, worker GPUs) from the parallel sizes and the containers' GPU requests."""
    if executor == "mp" and "mp" in release.controller.executors:
        return pipeline, tensor, tensor  # computeMpNodeAndGPUs
    if release.controller.gpu_math == "tensor":  # 0.15.0: replicas = PP - 1, GPUs = TP
        return pipeline, tensor, tensor
    return compute_ray_nodes_and_gpus(tensor * pipeline, head_gpus, worker_gpus)


def compute_ray_nodes_and_gpus(
    total: int, head_gpus: int, worker_gpus: int
) -> tuple[int, int, int]:
    """``computeRayNodeAndGPUs`` (0.15.1+): (nodes, head GPUs, worker GPUs) from GPU requests."""

    def nodes_for(gpus: int, per_node: int) -> int:
        return 1 if per_node == 0 else math.ceil(gpus / per_node)

    if worker_gpus > 0:
        nodes = nodes_for(total, worker_gpus)
        if head_gpus > 0:
            if nodes_for(total, head_gpus) == 1:
                nodes = 1
        else:
            head_gpus = total - worker_gpus * (nodes - 1)
        if nodes == 1:
            worker_gpus, head_gpus = 0, total
    elif head_gpus > 0:
        worker_gpus = 1
        remaining = total - head_gpus
        nodes = 1 + (nodes_for(remaining, worker_gpus) if remaining > 0 else 0)
    else:
        return total, 1, 1
    if total > head_gpus + worker_gpus * (nodes - 1):
        raise ReconcileError(
            f"the total required number of GPUs({total}) is less than the number of GPUs "
            f"assigned to the head node({head_gpus}) + worker node({worker_gpus * (nodes - 1)})"
        )
    return nodes, head_gpus, worker_gpus


def mount_pvc(pod_spec: Obj, storage_uri: str, read_only: bool) -> None:
    """The pod mutator for ``pvc://claim/path``: the claim at /mnt/models with subPath = path, on
    ``kserve-container`` (else ``worker-container``) and any transformer, every release."""
    if not storage_uri.startswith("pvc://"):
        raise UserError(
            f"storageUri {storage_uri!r}: the local cluster mounts pvc:// sources only; "
            "stage the model on a claim and use pvc://CLAIM/PATH"
        )
    claim, _, sub_path = storage_uri.removeprefix("pvc://").partition("/")
    names = {c["name"] for c in pod_spec["containers"]}
    target = HEAD_CONTAINER if HEAD_CONTAINER in names else WORKER_CONTAINER
    for container in pod_spec["containers"]:
        if container["name"] not in (target, "transformer-container"):
            continue
        mounts = container.setdefault("volumeMounts", [])
        if any(m.get("name") == PVC_VOLUME for m in mounts):
            continue
        mount: Obj = {"name": PVC_VOLUME, "mountPath": MODEL_MOUNT_PATH, "readOnly": read_only}
        if sub_path:
            mount["subPath"] = sub_path
        mounts.append(mount)
    volumes = pod_spec.setdefault("volumes", [])
    if not any(v.get("name") == PVC_VOLUME for v in volumes):
        volumes.append({"name": PVC_VOLUME, "persistentVolumeClaim": {"claimName": claim}})


def inject_metrics_annotations(annotations: dict[str, str]) -> None:
    """The pod mutator's metrics aggregator, every release
    (``webhook/admission/pod/metrics_aggregate_injector.go``): each pod gets
    ``enable-metric-aggregation`` and ``enable-prometheus-scraping`` from the ``metricsAggregator``
    configuration unless it carries them; with scraping "true" also ``prometheus.io/port: "9091"``
    (queue-proxy's, which a raw pod does not run). KServe's install configures both "false"
    (charts/kserve-resources/values.yaml at each tag)."""
    for key, value in METRICS_AGGREGATOR_DEFAULTS.items():
        annotations.setdefault(key, value)
    if annotations[SCRAPING_ANNOTATION] == "true":
        annotations["prometheus.io/port"] = QUEUE_PROXY_PROMETHEUS_PORT
        annotations["prometheus.io/path"] = "/metrics"


def set_default_pod_spec(pod_spec: Obj) -> None:
    """``setDefaultPodSpec`` plus the API server's defaults the kubelet relies on."""
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    pod_spec.setdefault("securityContext", {})
    if pod_spec.get("hostNetwork"):
        _default_host_network_ports(pod_spec)
    for container in pod_spec["containers"]:
        if container["name"] == HEAD_CONTAINER and not container.get("readinessProbe"):
            ports = container.get("ports") or [{"containerPort": 8080}]
            container["readinessProbe"] = {
                "tcpSocket": {"port": ports[0]["containerPort"]},
                "timeoutSeconds": 1,
                "periodSeconds": 10,
                "successThreshold": 1,
                "failureThreshold": 3,
            }


def _default_host_network_ports(pod_spec: Obj) -> None:
    """A pod on the host's network binds its container ports on the node: the API server sets
    each port's ``hostPort`` to its ``containerPort`` (``defaultHostNetworkPorts``,
    pkg/apis/core/v1/defaults.go, Kubernetes v1.37.2), so hostNetwork changes the ports too."""
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        for port in container.get("ports") or []:
            if not port.get("hostPort"):
                port["hostPort"] = port["containerPort"]


def merge_containers(runtime: Obj, isvc: Obj) -> Obj:
    """``MergeRuntimeContainers``: strategic merge, then args = runtime args + ISVC args."""
    merged: Obj = strategic_merge(runtime, _without_empty(isvc))
    _reconcile_env_conflicts(merged.get("env") or [], isvc.get("env") or [])
    merged["name"] = merged.get("name") or runtime.get("name")
    args = list(runtime.get("args") or []) + list(isvc.get("args") or [])
    if args:
        merged["args"] = args
    return merged


def merge_pod_specs(runtime_pod: Obj, isvc_pod: Obj) -> Obj:
    """``MergePodSpec``: the runtime's scheduling/volume fields under the ISVC's pod fields."""
    base = {k: copy.deepcopy(runtime_pod[k]) for k in _RUNTIME_POD_FIELDS if k in runtime_pod}
    overlay = {k: v for k, v in isvc_pod.items() if k in _POD_SPEC_FIELDS}
    merged: Obj = strategic_merge(base, _without_empty(overlay))
    return merged


def replace_placeholders(container: Obj, isvc_meta: Obj, runtime_name: str) -> Obj:
    """``ReplacePlaceholders``: the container's JSON executed as a Go template with the metadata."""
    try:
        text = gotemplate.execute(json.dumps(container), isvc_meta)
    except gotemplate.TemplateError as error:
        raise ReconcileError(
            f"failed to replace placeholders in serving runtime {runtime_name} Container "
            f"{container.get('name')}: {error}"
        ) from None
    result: Obj = json.loads(text)
    return result


def _require_raw_mode(release: Release, isvc: Obj) -> None:
    """``GetDeploymentMode``: the local cluster runs the raw reconciler only, as KServe should."""
    recorded = str((isvc.get("status") or {}).get("deploymentMode") or "")
    wanted = (isvc["metadata"].get("annotations") or {}).get(MODE, "")
    raw = release.validator.raw_mode
    new_names = release.minor >= (0, 16)
    if recorded:  # the status wins; 0.16-0.18.1 take it as written, 0.19+ normalize it
        mode = recorded
        if new_names and release.controller.legacy_status_is_raw:
            mode = LEGACY_MODES.get(recorded, recorded)
    else:
        mode = LEGACY_MODES.get(wanted, wanted) if new_names else wanted
        known = ("Knative", "Standard", "ModelMesh") if new_names else ("Serverless", raw)
        if mode not in known:
            mode = "Serverless"  # the configured default of a stock install, every release
    if mode != raw:
        raise ReconcileError(
            f"KServe {release.version} reconciles InferenceService "
            f"{isvc['metadata']['name']!r} with its Knative reconciler, not as {raw} "
            f"(status.deploymentMode {recorded!r}, annotation {wanted!r}): no worker runs"
        )


def _usable_runtime(runtime: Obj, model: Obj, isvc_name: str) -> Obj:
    """``reconcileModel`` for a named runtime: enabled, and it lists the model's format."""
    name = runtime["metadata"]["name"]
    spec: Obj = copy.deepcopy(runtime.get("spec") or {})
    if spec.get("disabled"):
        raise ReconcileError(f"specified runtime {name} is disabled")
    fmt = model.get("modelFormat") or {}
    labels = {
        f"{f['name']}:{f.get('version', '')}" for f in spec.get("supportedModelFormats") or []
    }
    labels |= {str(f["name"]) for f in spec.get("supportedModelFormats") or []}
    wanted = f"{fmt.get('name')}:{fmt['version']}" if fmt.get("version") else fmt.get("name")
    if wanted not in labels:
        raise ReconcileError(
            f"specified runtime {name} does not support specified framework/version"
        )
    if not spec.get("workerSpec"):
        raise ReconcileError(
            "you cannot set WorkerSpec in the InferenceService if the ServingRuntime does not "
            "have a WorkerSpec"
        )
    del isvc_name
    return spec


def _head_pod_spec(
    release: Release, runtime_spec: Obj, predictor: Obj, model: Obj, isvc: Obj
) -> Obj:
    runtime_container = _container_named(runtime_spec.get("containers") or [], HEAD_CONTAINER)
    if runtime_container is None:
        raise ReconcileError("no container configuration found in selected serving runtime")
    model_container = {k: v for k, v in model.items() if k not in _MODEL_FIELDS}
    container = merge_containers(runtime_container, model_container)
    runtime_name = str(model.get("runtime", ""))
    container = replace_placeholders(container, isvc["metadata"], runtime_name)
    pod = merge_pod_specs(runtime_spec, predictor)
    others = [c for c in runtime_spec.get("containers") or [] if c["name"] != HEAD_CONTAINER]
    pod["containers"] = [container, *copy.deepcopy(others)]
    pod["containers"] += copy.deepcopy(predictor.get("containers") or [])
    if "INFERENCE_SERVICE_NAME" in release.controller.head_env:  # 0.17+, every container
        for each in pod["containers"]:
            set_env(each, "INFERENCE_SERVICE_NAME", isvc["metadata"]["name"])
    return pod


def _worker_pod_spec(release: Release, runtime_spec: Obj, predictor: Obj) -> tuple[Obj, int, int]:
    runtime_worker: Obj = runtime_spec.get("workerSpec") or {}
    isvc_worker: Obj = predictor.get("workerSpec") or {}
    default = None if release.requires_parallel_sizes else 1  # 0.15.1+ default both to 1
    pipeline = isvc_worker.get("pipelineParallelSize") or runtime_worker.get(
        "pipelineParallelSize", default
    )
    tensor = isvc_worker.get("tensorParallelSize") or runtime_worker.get(
        "tensorParallelSize", default
    )
    if not runtime_worker.get("containers"):
        raise ReconcileError(
            "No workerSpec container configuration found in selected serving runtime"
        )
    runtime_container = _container_named(runtime_worker["containers"], WORKER_CONTAINER)
    if runtime_container is None:
        raise ReconcileError(f"failed to find {WORKER_CONTAINER} in ServingRuntime containers")
    isvc_container = (isvc_worker.get("containers") or [{}])[0]
    container = merge_containers(runtime_container, isvc_container)
    pod = merge_pod_specs(runtime_worker, isvc_worker)
    pod["containers"] = [container]
    if pipeline is None or tensor is None:  # 0.15.0's runtime webhook admits neither
        raise ReconcileError("pipelineParallelSize must be set when WorkerSpec is set")
    return pod, int(pipeline), int(tensor)


def _nodes_and_gpus(
    release: Release, runtime: Obj, head_spec: Obj, worker_spec: Obj, pipeline: int, tensor: int
) -> tuple[int, int, int]:
    executor = ((runtime.get("spec") or {}).get("annotations") or {}).get(EXECUTOR_ANNOTATION)
    return compute_nodes(
        release,
        tensor=tensor,
        pipeline=pipeline,
        head_gpus=_gpu_request(head_spec),
        worker_gpus=_gpu_request(worker_spec),
        executor=executor or "ray",
    )


def _inject_env(
    release: Release,
    head_spec: Obj,
    worker_spec: Obj,
    isvc: Obj,
    storage_uri: str,
    generation: int,
    sizes: dict[str, int],
) -> None:
    """``multiNodeProcess``: the variables this release sets, and only those."""
    name = isvc["metadata"]["name"]
    values = {
        "PIPELINE_PARALLEL_SIZE": sizes["pipeline"],
        "TENSOR_PARALLEL_SIZE": sizes["tensor"],
        "RAY_NODE_COUNT": sizes["nodes"],
        "MODEL_NAME": name,
        "ISVC_NAME": name,
        "HEAD_SVC": f"{name}-head-{generation}",
        "WORKER_SVC": f"{name}-workers-{generation}",
    }
    head = _container_named(head_spec["containers"], HEAD_CONTAINER)
    worker = _container_named(worker_spec["containers"], WORKER_CONTAINER)
    assert head is not None
    assert worker is not None
    scheme = storage_uri.split("://")[0]
    for variable in release.controller.head_env:
        if variable == "MODEL_DIR":
            if scheme in release.validator.storage_schemes:  # pvc (0.15); pvc, oci (0.16+)
                set_env(head, variable, MODEL_MOUNT_PATH)
        elif variable == "REQUEST_GPU_COUNT":
            set_env(head, variable, str(sizes["head_gpus"]))
        elif variable != "INFERENCE_SERVICE_NAME":  # set on every container by _head_pod_spec
            set_env(head, variable, str(values[variable]))
    for variable in release.controller.worker_env:
        value = sizes["worker_gpus"] if variable == "REQUEST_GPU_COUNT" else values[variable]
        set_env(worker, variable, str(value))


def _head_replicas(release: Release, predictor: Obj, annotations: dict[str, str]) -> int:
    """``createRawDefaultDeployment``: minReplicas only under the release's multi-node class;
    otherwise the replica count is left to an autoscaler, which starts it at one."""
    if annotations.get(AUTOSCALER) == release.autoscaler_class:
        return int(predictor.get("minReplicas", 1))
    return 1


def _deployment_strategy(strategy: Obj, worker: bool) -> Obj:
    """``setDefaultDeploymentSpec``; RollingUpdate workers get maxUnavailable 0%, maxSurge 100%."""
    result = copy.deepcopy(strategy) or {"type": "RollingUpdate"}
    if result.get("type", "RollingUpdate") == "RollingUpdate":
        result["type"] = "RollingUpdate"
        if worker:
            result["rollingUpdate"] = {"maxUnavailable": "0%", "maxSurge": "100%"}
        else:
            result.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})
    return result


def _reconciler_gpu_types(
    release: Release, isvc_annotations: dict[str, str], pod_annotations: dict[str, str]
) -> list[str]:
    """The GPU types ``addGPUResourceToDeployment`` looks for in a container's resources.

    0.15.0 splits the Deployment's annotation on commas, so a JSON array never names a type; from
    0.15.1 the pod template's annotation is parsed as the JSON array the webhook admitted.
    """
    if release.controller.gpu_types_annotation == "comma-split":
        raw = isvc_annotations.get(GPU_TYPES, "")
        return list(KSERVE_DEFAULT_GPU_TYPES) + [t for t in raw.split(",") if raw]
    return gpu_resource_types(pod_annotations)


def _set_gpu_resources(
    pod_spec: Obj, container_name: str, count: int, gpu_types: list[str]
) -> None:
    """``addGPUResourceToDeployment``: the container's GPU limit and request := ``count``, on the
    first known type it already asks for, else ``nvidia.com/gpu``."""
    container = _container_named(pod_spec["containers"], container_name)
    assert container is not None
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.setdefault("requests", {})
    resource = KSERVE_DEFAULT_GPU_TYPES[0]
    for candidate in gpu_types:
        if _nonzero(limits.get(candidate)) or _nonzero(requests.get(candidate)):
            resource = candidate
            break
    limits[resource] = str(count)
    requests[resource] = str(count)


def _services(
    release: Release, head: Workload, worker: Workload, name: str, generation: int
) -> list[Service]:
    container = head.pod_spec["containers"][0]
    ports = container.get("ports") or [{"containerPort": 8080}]
    service_ports = [(80, int(ports[0]["containerPort"]))]
    service_ports += [(int(p["containerPort"]), int(p["containerPort"])) for p in ports[1:]]
    labels = {k: v for k, v in head.labels.items() if k != "app"}
    made = {
        "predictor": Service(
            name=head.name,
            selector={"app": head.labels["app"]},
            headless=False,
            ports=service_ports,
            labels=labels,
        ),
        "head": Service(
            name=f"{name}-head-{generation}",
            selector={"app": head.labels["app"], GENERATION_LABEL: str(generation)},
            headless=True,
            publish_not_ready=True,
            labels={**labels, ROLE_LABEL: "head"},
        ),
        "workers": Service(
            name=f"{name}-workers-{generation}",
            selector={"app": worker.labels["app"], GENERATION_LABEL: str(generation)},
            headless=True,
            publish_not_ready=True,
            labels={**labels, ROLE_LABEL: "worker"},
        ),
    }
    return [made[kind] for kind in release.controller.services]


def _pod_annotations(
    release: Release, runtime_spec: Obj, isvc: Obj, predictor: Obj
) -> tuple[dict[str, str], dict[str, str]]:
    """The head's and the workers' pod annotations, as ``buildObjectMeta`` and ``reconcileWorker``
    make them (components/predictor.go, v0.15.0 .. v0.20.0): runtime < ISVC < predictor, each
    without KServe's default ``serviceAnnotationDisallowedList``, except that the workers start
    from the runtime's ``workerSpec.annotations``, unfiltered, where the head starts from the
    runtime's own."""
    disallowed = DISALLOWED_ANNOTATIONS
    if release.minor < (0, 17):  # ModelFormatAnnotationKey joined the list in v0.17.0
        disallowed = disallowed - {"modelFormat"}

    def allowed(annotations: Any) -> dict[str, str]:
        return {k: v for k, v in (annotations or {}).items() if k not in disallowed}

    shared = {
        **allowed(isvc["metadata"].get("annotations")),
        **allowed(predictor.get("annotations")),
    }
    head = {**allowed(runtime_spec.get("annotations")), **shared}
    worker_own = (runtime_spec.get("workerSpec") or {}).get("annotations") or {}
    worker = {**worker_own, **shared}
    return head, worker


def _labels(runtime_labels: Any, isvc: Obj, predictor: Obj) -> dict[str, str]:
    """``buildObjectMeta``: runtime < ISVC < predictor labels, then KServe's own (every release)."""
    labels: dict[str, str] = {}
    for source in (runtime_labels, isvc["metadata"].get("labels"), predictor.get("labels")):
        labels.update(source or {})
    labels["serving.kserve.io/inferenceservice"] = isvc["metadata"]["name"]
    labels["component"] = "predictor"
    return labels


def _gpu_request(pod_spec: Obj) -> int:
    """``GetGPUResourceQtyByType(.., "Request")`` of the first container: requests only."""
    requests = (pod_spec["containers"][0].get("resources") or {}).get("requests") or {}
    for resource in KSERVE_DEFAULT_GPU_TYPES:
        if resource in requests:
            return int(quantity(requests[resource], f"resources.requests.{resource}"))
    return 0


def _reconcile_env_conflicts(merged_env: list[Obj], overlay_env: list[Obj]) -> None:
    overlay = {e.get("name"): e for e in overlay_env}
    for var in merged_env:
        if "value" in var and "valueFrom" in var and var.get("name") in overlay:
            if overlay[var["name"]].get("valueFrom") is not None:
                del var["value"]
            else:
                del var["valueFrom"]


def _container_named(containers: list[Obj], name: str) -> Obj | None:
    return next((c for c in containers if c.get("name") == name), None)


def _nonzero(value: Any) -> bool:
    return value is not None and quantity(value, "GPU quantity") != 0


def _without_empty(value: Any) -> Any:
    """What Go's json.Marshal sends for an omitempty struct: no empty strings, lists or maps."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def env_of(container: Obj) -> dict[str, str]:
    """A container's literal env values by name (valueFrom entries omitted)."""
    return {
        v["name"]: str(v.get("value", ""))
        for v in container.get("env") or []
        if env_value([v], v["name"]) is not None and "valueFrom" not in v
    }
