"""What KServe's RawDeployment reconciler makes of a ServingRuntime and a multi-node ISVC.

A faithful, small re-telling of KServe's Go code (read at the commit named in
``../shared/design/kserve-multinode.md``), so that the local cluster runs the pods a real cluster
would run. Each function names the KServe function it follows:

- admission: ``validateMultiNodeVariables`` (inference_service_validation.go)
- head pod: ``buildPodSpec`` / ``MergeServingRuntimeAndInferenceServiceSpecs`` (predictor.go,
  utils.go): the runtime's ``kserve-container`` merged with the ISVC's model container by strategic
  merge patch, args concatenated (runtime first), ``{{.Name}}`` replaced,
  INFERENCE_SERVICE_NAME added
- worker pod: ``multiNodeProcess``: ``worker-container`` merged the same way, the only container
- GPUs and nodes: ``computeRayNodeAndGPUs`` (GPU *requests* only), injected as env, then
  ``addGPUResourceToDeployment`` sets the GPU limit and request of each pod
- storage: the pod mutator's ``pvc://claim/path`` mount at /mnt/models (subPath, read-only)
- Deployments and Services: ``createRawDeployment`` (worker replicas = RAY_NODE_COUNT - 1),
  ``createService`` (``<isvc>-predictor``, headless ``<isvc>-head-<gen>`` and
  ``<isvc>-workers-<gen>``)
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

from multinode_llm.errors import UserError
from multinode_llm.local.k8s import Obj, env_value, find, quantity, set_env, strategic_merge

API_GROUP = "serving.kserve.io"
HEAD_CONTAINER = "kserve-container"
WORKER_CONTAINER = "worker-container"
MODEL_MOUNT_PATH = "/mnt/models"
PVC_VOLUME = "kserve-pvc-source"
GPU_RESOURCE_TYPES = ("nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu", "habana.ai/gaudi")
GPU_TYPES_ANNOTATION = f"{API_GROUP}/gpu-resource-types"
GENERATION_LABEL = "isvc.generation"
_BASIC_RESOURCES = {"cpu", "memory", "storage", "ephemeral-storage"}
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


@dataclass(frozen=True)
class Workload:
    """One Deployment KServe creates: its name, replica count and pod template."""

    name: str
    role: str  # "head" or "worker"
    replicas: int
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_spec: Obj

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


def reconcile(objects: list[Obj], namespace: str = "default", generation: int = 1) -> Reconciled:
    """The Deployments and Services for the one multi-node InferenceService among ``objects``."""
    isvc = _the_isvc(objects)
    name = isvc["metadata"]["name"]
    annotations: dict[str, str] = dict(isvc["metadata"].get("annotations") or {})
    predictor: Obj = isvc.get("spec", {}).get("predictor") or {}
    model: Obj = predictor.get("model") or {}
    validate(isvc)
    runtime = _the_runtime(objects, model, name)
    runtime_spec: Obj = copy.deepcopy(runtime["spec"])

    head_spec = _head_pod_spec(runtime_spec, predictor, model, isvc)
    worker_spec, pipeline, tensor = _worker_pod_spec(runtime_spec, predictor, name)
    nodes, worker_gpus, head_gpus = compute_ray_nodes_and_gpus(
        worker_spec, head_spec, tensor * pipeline, name
    )
    storage_uri = str(model["storageUri"])
    _inject_env(head_spec, worker_spec, isvc, pipeline, tensor, nodes, head_gpus, worker_gpus)
    _inject_env_worker_services(worker_spec, name, generation)
    read_only = annotations.get("storage.kserve.io/readonly", "true") != "false"
    for spec in (head_spec, worker_spec):
        mount_pvc(spec, storage_uri, read_only)
        set_default_pod_spec(spec)
    gpu_types = gpu_resource_types({**annotations, **(runtime_spec.get("annotations") or {})})
    _set_gpu_resources(head_spec, HEAD_CONTAINER, head_gpus, gpu_types)
    _set_gpu_resources(worker_spec, WORKER_CONTAINER, worker_gpus, gpu_types)

    labels = _pod_labels(runtime_spec.get("labels"), isvc, predictor)
    labels[GENERATION_LABEL] = str(generation)
    head_name, worker_name = f"{name}-predictor", f"{name}-predictor-worker"
    pod_annotations = {**(runtime_spec.get("annotations") or {}), **annotations}
    pod_annotations["internal.serving.kserve.io/storage-initializer-sourceuri"] = storage_uri
    head = Workload(
        name=head_name,
        role="head",
        replicas=int(predictor.get("minReplicas", 1)),
        labels={**labels, "app": f"isvc.{head_name}"},
        annotations=pod_annotations,
        pod_spec=head_spec,
    )
    worker_labels = _pod_labels(runtime_spec.get("workerSpec", {}).get("labels"), isvc, predictor)
    worker_labels[GENERATION_LABEL] = str(generation)
    worker = Workload(
        name=worker_name,
        role="worker",
        replicas=nodes - 1,
        labels={**worker_labels, "app": f"isvc.{worker_name}"},
        annotations=pod_annotations,
        pod_spec=worker_spec,
    )
    return Reconciled(
        isvc_name=name,
        namespace=namespace,
        generation=generation,
        storage_uri=storage_uri,
        head=head,
        worker=worker,
        services=_services(head, worker, name, generation),
        node_count=nodes,
        head_gpus=head_gpus,
        worker_gpus=worker_gpus,
    )


def validate(isvc: Obj) -> None:
    """KServe's admission webhook for multi-node ISVCs (its messages), plus the mode checks."""
    name = isvc["metadata"]["name"]
    annotations = isvc["metadata"].get("annotations") or {}
    predictor = isvc.get("spec", {}).get("predictor") or {}
    worker = predictor.get("workerSpec")
    invalid = f"the InferenceService {name!r} is invalid"
    mode = annotations.get(f"{API_GROUP}/deploymentMode", "")
    if mode not in ("RawDeployment", "Standard"):
        raise UserError(
            f"{invalid}: serving.kserve.io/deploymentMode={mode!r}: the local cluster, "
            "like KServe's "
            "multi-node support, runs RawDeployment/Standard only; set it to Standard"
        )
    if worker is None:
        raise UserError(f"{invalid}: it has no predictor.workerSpec, so it is not multi-node")
    if len(worker.get("containers") or []) > 1:
        raise UserError(f"{invalid}: setting multiple containers in workerSpec is not allowed")
    model = predictor.get("model") or {}
    for variable in ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE"):
        if env_value(model.get("env") or [], variable) is not None:
            raise UserError(
                f"{invalid}: setting {variable} in environment variables is not allowed"
            )
    for resources in [model.get("resources")] + [
        c.get("resources") for c in worker.get("containers") or []
    ]:
        if _has_unknown_gpu_type(resources or {}, annotations):
            raise UserError(
                f"{invalid}: Unknown GPU resource type. Set 'serving.kserve.io/gpu-resource-types' "
                "annotation to use custom gpu resource type"
            )
    storage_uri = model.get("storageUri")
    if not storage_uri:
        raise UserError(f"{invalid}: StorageURI must be set for multinode enabled")
    protocol = str(storage_uri).split("://")[0]
    if protocol not in ("pvc", "oci"):
        raise UserError(
            f"{invalid}: Multinode only supports 'pvc' and 'oci' Storage Protocol({protocol})"
        )
    autoscaler = annotations.get(f"{API_GROUP}/autoscalerClass", "")
    if autoscaler != "none":
        raise UserError(f"{invalid}: Multinode only supports 'none' autoscaler({autoscaler})")
    for key, label in (("pipelineParallelSize", "Pipeline"), ("tensorParallelSize", "Tensor")):
        size = worker.get(key)
        if size is not None and int(size) < 1:
            raise UserError(
                f"{invalid}: WorkerSpec.{label}ParallelSize cannot be less than 1({size})"
            )
    if int(predictor.get("minReplicas", 1)) != 1:
        raise UserError(
            f"{invalid}: predictor.minReplicas={predictor.get('minReplicas')}: "
            "a multi-node group has "
            "exactly one head; set it to 1"
        )


def compute_ray_nodes_and_gpus(
    worker_spec: Obj, head_spec: Obj, total: int, isvc_name: str
) -> tuple[int, int, int]:
    """KServe's computeRayNodeAndGPUs: (nodes, GPUs per worker, GPUs of the head) from GPU requests.

    Only GPU *requests* of the first container count (a limit without a request counts as none,
    exactly as in KServe, which reads the spec before the API server defaults requests).
    """
    head_gpus = _gpu_request(head_spec)
    worker_gpus = _gpu_request(worker_spec)

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
        raise UserError(
            f"InferenceService {isvc_name!r}: the total required number of GPUs({total}) "
            "is less than "
            f"the number of GPUs assigned to the head node({head_gpus}) + worker node("
            f"{worker_gpus * (nodes - 1)}): "
            "request tensor-parallel GPUs on the head and the workers"
        )
    return nodes, worker_gpus, head_gpus


def gpu_resource_types(annotations: dict[str, str]) -> list[str]:
    """The known GPU resource names plus those declared in the gpu-resource-types annotation."""
    types = list(GPU_RESOURCE_TYPES)
    custom = annotations.get(GPU_TYPES_ANNOTATION)
    if custom:
        try:
            declared = json.loads(custom)
        except json.JSONDecodeError:
            declared = None
        if not isinstance(declared, list):
            raise UserError(
                f"invalid GPU format({custom}) for {GPU_TYPES_ANNOTATION} annotation: "
                'must be a valid JSON array such as ["nvidia.com/mig-1g.10gb"]'
            )
        types += [str(t) for t in declared if str(t) not in types]
    return types


def mount_pvc(pod_spec: Obj, storage_uri: str, read_only: bool) -> None:
    """The pod mutator for ``pvc://claim/path``: the claim at /mnt/models with subPath = path."""
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


def set_default_pod_spec(pod_spec: Obj) -> None:
    """KServe's setDefaultPodSpec plus the API server's defaults the kubelet relies on."""
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    pod_spec.setdefault("securityContext", {})
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


def _the_isvc(objects: list[Obj]) -> Obj:
    isvcs = find(objects, "InferenceService")
    if len(isvcs) != 1:
        raise UserError(
            f"the rendered chart holds {len(isvcs)} InferenceServices; the local cluster runs "
            "exactly one: check the values (is the chart's InferenceService enabled?)"
        )
    return isvcs[0]


def _the_runtime(objects: list[Obj], model: Obj, isvc_name: str) -> Obj:
    runtimes = find(objects, "ServingRuntime") + find(objects, "ClusterServingRuntime")
    wanted = model.get("runtime")
    if wanted:
        runtimes = [r for r in runtimes if r["metadata"]["name"] == wanted]
    else:
        fmt = (model.get("modelFormat") or {}).get("name")
        runtimes = [
            r
            for r in runtimes
            if any(
                f.get("name") == fmt and f.get("autoSelect")
                for f in r["spec"].get("supportedModelFormats") or []
            )
        ]
    if not runtimes:
        raise UserError(
            f"InferenceService {isvc_name!r}: "
            "No ServingRuntimes or ClusterServingRuntimes with the "
            f"name: {wanted or '(auto-selected)'}: render the runtime with the InferenceService"
        )
    runtime = runtimes[0]
    if runtime["spec"].get("disabled"):
        raise UserError(f"specified runtime {runtime['metadata']['name']} is disabled")
    if not runtime["spec"].get("workerSpec"):
        raise UserError(
            f"you cannot set WorkerSpec in the InferenceService {isvc_name!r} "
            "if the ServingRuntime "
            f"{runtime['metadata']['name']!r} does not have a WorkerSpec"
        )
    return runtime


def merge_containers(runtime: Obj, isvc: Obj) -> Obj:
    """KServe's MergeRuntimeContainers: strategic merge, then args = runtime args + ISVC args."""
    merged: Obj = strategic_merge(runtime, _without_empty(isvc))
    _reconcile_env_conflicts(merged.get("env") or [], isvc.get("env") or [])
    merged["name"] = merged.get("name") or runtime.get("name")
    args = list(runtime.get("args") or []) + list(isvc.get("args") or [])
    if args:
        merged["args"] = args
    return merged


def merge_pod_specs(runtime_pod: Obj, isvc_pod: Obj) -> Obj:
    """KServe's MergePodSpec: the runtime's scheduling/volume fields under the ISVC's pod fields."""
    base = {k: copy.deepcopy(runtime_pod[k]) for k in _RUNTIME_POD_FIELDS if k in runtime_pod}
    overlay = {k: v for k, v in isvc_pod.items() if k in _POD_SPEC_FIELDS}
    merged: Obj = strategic_merge(base, _without_empty(overlay))
    return merged


def replace_placeholders(container: Obj, isvc_meta: Obj) -> Obj:
    """KServe's ReplacePlaceholders for what runtimes use: ``{{.Name}}``, ``{{.Namespace}}``."""
    text = json.dumps(container)
    for placeholder, value in (
        ("{{.Name}}", isvc_meta.get("name", "")),
        ("{{.Namespace}}", isvc_meta.get("namespace", "")),
    ):
        text = text.replace(placeholder, str(value))
    if "{{" in text:
        raise UserError(
            f"container {container.get('name')!r} uses a placeholder the local cluster does not "
            "replace (it knows {{.Name}} and {{.Namespace}}): use one of those"
        )
    result: Obj = json.loads(text)
    return result


def _head_pod_spec(runtime_spec: Obj, predictor: Obj, model: Obj, isvc: Obj) -> Obj:
    isvc_name = isvc["metadata"]["name"]
    runtime_container = _container_named(runtime_spec.get("containers") or [], HEAD_CONTAINER)
    if runtime_container is None:
        raise UserError(f"failed to find {HEAD_CONTAINER} in ServingRuntime containers")
    model_container = {k: v for k, v in model.items() if k not in _MODEL_FIELDS}
    container = merge_containers(runtime_container, model_container)
    container = replace_placeholders(container, {**isvc["metadata"], "name": isvc_name})
    pod = merge_pod_specs(runtime_spec, predictor)
    others = [c for c in runtime_spec.get("containers") or [] if c["name"] != HEAD_CONTAINER]
    pod["containers"] = [container, *copy.deepcopy(others)]
    pod["containers"] += copy.deepcopy(predictor.get("containers") or [])
    for each in pod["containers"]:
        set_env(each, "INFERENCE_SERVICE_NAME", isvc_name)
    return pod


def _worker_pod_spec(runtime_spec: Obj, predictor: Obj, isvc_name: str) -> tuple[Obj, int, int]:
    runtime_worker: Obj = runtime_spec.get("workerSpec") or {}
    isvc_worker: Obj = predictor.get("workerSpec") or {}
    pipeline = int(
        isvc_worker.get("pipelineParallelSize") or runtime_worker.get("pipelineParallelSize") or 1
    )
    tensor = int(
        isvc_worker.get("tensorParallelSize") or runtime_worker.get("tensorParallelSize") or 1
    )
    if not runtime_worker.get("containers"):
        raise UserError("No workerSpec container configuration found in selected serving runtime")
    runtime_container = _container_named(runtime_worker["containers"], WORKER_CONTAINER)
    if runtime_container is None:
        raise UserError(f"failed to find {WORKER_CONTAINER} in ServingRuntime containers")
    isvc_container = (isvc_worker.get("containers") or [{}])[0]
    container = merge_containers(runtime_container, isvc_container)
    pod = merge_pod_specs(runtime_worker, isvc_worker)
    pod["containers"] = [container]
    del isvc_name  # the worker container's placeholders are not replaced by KServe either
    return pod, pipeline, tensor


def _inject_env(
    head_spec: Obj,
    worker_spec: Obj,
    isvc: Obj,
    pipeline: int,
    tensor: int,
    nodes: int,
    head_gpus: int,
    worker_gpus: int,
) -> None:
    name = isvc["metadata"]["name"]
    head = _container_named(head_spec["containers"], HEAD_CONTAINER)
    worker = _container_named(worker_spec["containers"], WORKER_CONTAINER)
    assert head is not None
    assert worker is not None
    storage_uri = str(isvc["spec"]["predictor"]["model"]["storageUri"])
    for variable, value in (
        ("PIPELINE_PARALLEL_SIZE", pipeline),
        ("TENSOR_PARALLEL_SIZE", tensor),
        ("RAY_NODE_COUNT", nodes),
        ("REQUEST_GPU_COUNT", head_gpus),
        ("MODEL_NAME", name),
    ):
        set_env(head, variable, str(value))
    if storage_uri.split("://")[0] in ("pvc", "oci"):
        set_env(head, "MODEL_DIR", MODEL_MOUNT_PATH)
    for variable, value in (
        ("RAY_NODE_COUNT", nodes),
        ("REQUEST_GPU_COUNT", worker_gpus),
        ("PIPELINE_PARALLEL_SIZE", pipeline),
        ("TENSOR_PARALLEL_SIZE", tensor),
        ("ISVC_NAME", name),
    ):
        set_env(worker, variable, str(value))


def _inject_env_worker_services(worker_spec: Obj, isvc_name: str, generation: int) -> None:
    worker = worker_spec["containers"][0]
    set_env(worker, "HEAD_SVC", f"{isvc_name}-head-{generation}")
    set_env(worker, "WORKER_SVC", f"{isvc_name}-workers-{generation}")


def _set_gpu_resources(
    pod_spec: Obj, container_name: str, count: int, gpu_types: list[str]
) -> None:
    """KServe's addGPUResourceToDeployment: the container's GPU limit and request := ``count``."""
    container = _container_named(pod_spec["containers"], container_name)
    assert container is not None
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.setdefault("requests", {})
    resource = GPU_RESOURCE_TYPES[0]
    for candidate in gpu_types:
        if _nonzero(limits.get(candidate)) or _nonzero(requests.get(candidate)):
            resource = candidate
            break
    limits[resource] = str(count)
    requests[resource] = str(count)


def _services(head: Workload, worker: Workload, name: str, generation: int) -> list[Service]:
    container = head.pod_spec["containers"][0]
    ports = container.get("ports") or [{"containerPort": 8080}]
    service_ports = [(80, int(ports[0]["containerPort"]))]
    service_ports += [(int(p["containerPort"]), int(p["containerPort"])) for p in ports[1:]]
    return [
        Service(
            name=head.name,
            selector={"app": head.labels["app"]},
            headless=False,
            ports=service_ports,
        ),
        Service(
            name=f"{name}-head-{generation}",
            selector={"app": head.labels["app"], GENERATION_LABEL: str(generation)},
            headless=True,
            publish_not_ready=True,
        ),
        Service(
            name=f"{name}-workers-{generation}",
            selector={"app": worker.labels["app"], GENERATION_LABEL: str(generation)},
            headless=True,
            publish_not_ready=True,
        ),
    ]


def _pod_labels(runtime_labels: Any, isvc: Obj, predictor: Obj) -> dict[str, str]:
    labels: dict[str, str] = {}
    for source in (runtime_labels, isvc["metadata"].get("labels"), predictor.get("labels")):
        labels.update(source or {})
    labels[f"{API_GROUP}/inferenceservice"] = isvc["metadata"]["name"]
    labels["component"] = "predictor"
    return labels


def _gpu_request(pod_spec: Obj) -> int:
    requests = (pod_spec["containers"][0].get("resources") or {}).get("requests") or {}
    for resource in GPU_RESOURCE_TYPES:
        if resource in requests:
            return int(quantity(requests[resource], f"resources.requests.{resource}"))
    return 0


def _has_unknown_gpu_type(resources: Obj, annotations: dict[str, str]) -> bool:
    names = set((resources.get("limits") or {}).keys()) | set(
        (resources.get("requests") or {}).keys()
    )
    possible = {n for n in names if n not in _BASIC_RESOURCES}
    return bool(possible - set(gpu_resource_types(annotations)))


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
