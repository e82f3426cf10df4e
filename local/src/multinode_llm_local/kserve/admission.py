"""KServe's admission webhooks for what the chart renders, per release.

- the InferenceService defaulter (``pkg/apis/serving/v1beta1/inference_service_defaults.go``,
  ``Default`` / ``DefaultInferenceService``) and the re-marshalling of controller-runtime's
  defaulting handler (``pkg/webhook/admission/defaulter_custom.go``);
- the InferenceService validator (``inference_service_validation.go``: ``ValidateCreate`` /
  ``ValidateUpdate``, ``validateInferenceService``, ``validateMultiNodeVariables``,
  ``validateDeploymentMode``, ``validateAutoScalingCompExtension``), messages from ``component.go``;
- the (Cluster)ServingRuntime validator (``pkg/webhook/admission/servingruntime/
  servingruntime_webhook.go``: ``Handle``, ``validateServingRuntimePriority``,
  ``validateModelFormatPrioritySame``, ``validateMultiNodeSpec``, ``validateBlockedEnvVars``).

Read at each tag from v0.15.0 to v0.20.0; what differs between releases comes from the release's
entry in the chart's ``kserve-releases.yaml`` (``Release.defaulter``, ``.validator``,
``.requires_parallel_sizes``). Only the checks that can apply to a multi-node InferenceService with
``predictor.model`` and ``workerSpec`` are told here; the Knative (KPA) checks stop at their first
rule, the one our objects can meet (a ``deploymentStrategy``).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local.k8s import Obj, canonical_quantity
from multinode_llm_local.kserve.releases import Release

MODE = "serving.kserve.io/deploymentMode"
AUTOSCALER = "serving.kserve.io/autoscalerClass"
GPU_TYPES = "serving.kserve.io/gpu-resource-types"
# KServe's DefaultGPUResourceTypeList (pkg/constants/constants.go, the same at every tag from
# v0.15.0 to v0.20.0): what GetGPUResourceQtyByType (pkg/utils/utils.go) counts and the webhooks
# admit undeclared. KServe's fact, not the chart's accelerator table (accelerators.yaml).
KSERVE_DEFAULT_GPU_TYPES = ("nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu", "habana.ai/gaudi")
BASIC_RESOURCES = ("cpu", "memory", "storage", "ephemeral-storage")
LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAME_FORMAT = "[a-z]([-a-z0-9]*[a-z0-9])?"


class Denied(UserError):  # noqa: N818 - a denial, named as KServe's admission responses are
    """A webhook's denial; ``str()`` is KServe's message (after the API server's own prefix)."""


# --- the InferenceService defaulter -----------------------------------------------------------


def default_isvc(release: Release, isvc: Obj, config: Obj | None = None) -> Obj:
    """What the live object holds after KServe's mutating webhook (a new dict).

    ``config`` stands for the ``inferenceservice-config`` ConfigMap's ``deploy`` section
    (``defaultDeploymentMode``, default ``Serverless`` at every tag).
    """
    result = copy.deepcopy(isvc)
    annotations = result.setdefault("metadata", {}).setdefault("annotations", {})
    _default_mode(release, annotations, (config or {}).get("defaultDeploymentMode", "Serverless"))
    predictor = result.setdefault("spec", {}).setdefault("predictor", {})
    _framework_to_model(predictor)
    model = predictor.get("model")
    if model is not None:
        fmt = (model.get("modelFormat") or {}).get("name", "")
        if release.defaulter.adds_model_format_annotation and fmt:
            annotations.setdefault("modelFormat", fmt)  # 0.17+: ModelFormatAnnotationKey
        model.setdefault("name", "")  # corev1.Container.Name has no omitempty
        _canonical_resources(model)
    for container in (predictor.get("workerSpec") or {}).get("containers") or []:
        _canonical_resources(container)
    return result


# setPredictorModelDefaults: a framework predictor becomes a model of that format; these three get
# protocol v2 when they name none (assignTritonRuntime, assignONNXRuntime, ...HuggingFaceRuntime).
_FRAMEWORKS = (
    "sklearn",
    "tensorflow",
    "xgboost",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
_V2_FRAMEWORKS = ("triton", "onnx", "huggingface")


def _framework_to_model(predictor: Obj) -> None:
    for framework in _FRAMEWORKS:
        spec = predictor.pop(framework, None)
        if spec is None:
            continue
        if framework in _V2_FRAMEWORKS:
            spec.setdefault("protocolVersion", "v2")
        predictor["model"] = {"modelFormat": {"name": framework}, **spec}
        return


def _default_mode(release: Release, annotations: Obj, configured: str) -> None:
    if MODE in annotations:
        if release.defaulter.rewrites_legacy_mode:
            annotations[MODE] = LEGACY_MODES.get(annotations[MODE], annotations[MODE])
        return
    raw = "Standard" if release.minor >= (0, 16) else "RawDeployment"
    if release.minor >= (0, 16):
        configured = LEGACY_MODES.get(configured, configured)
    if configured in ("ModelMesh", raw):
        annotations[MODE] = configured


def _canonical_resources(container: Obj) -> None:
    """Quantities come back as canonical strings: the handler marshals resource.Quantity."""
    resources = container.get("resources")
    for kind in ("limits", "requests"):
        values = (resources or {}).get(kind)
        if resources is not None and values:
            resources[kind] = {name: canonical_quantity(v) for name, v in values.items()}


# --- the InferenceService validator ---------------------------------------------------------


def validate_isvc(release: Release, isvc: Obj, old: Obj | None = None) -> None:
    """Raise ``Denied`` as KServe's validating webhook would, on create (``old`` None) or update."""
    if old is not None:
        deleting = bool(isvc.get("metadata", {}).get("deletionTimestamp"))
        if deleting and release.minor >= (0, 19):
            return  # 0.19+: an update during deletion is not validated at all
        if not (deleting and release.minor >= (0, 17)):  # 0.17-0.18.1 skip only this check
            _check_mode_change(release, isvc, old)
    name = isvc["metadata"]["name"]
    annotations: Obj = isvc["metadata"].get("annotations") or {}
    predictor: Obj = (isvc.get("spec") or {}).get("predictor") or {}
    if not _NAME.match(name):
        raise Denied(
            f'the InferenceService "{name}" is invalid: a InferenceService name must consist of '
            "lower case alphanumeric characters or '-', and must start with alphabetical "
            f'character. (e.g. "my-name" or "abc-123", regex used for validation is '
            f"'{_NAME_FORMAT}')"
        )
    _check_autoscaler_class(release, annotations)
    _check_blocked_env(release, name, predictor)
    _check_multinode(release, name, annotations, predictor)
    model = predictor.get("model") or {}
    if release.validator.model_name_forbidden and model.get("name"):
        raise Denied("the 'name' field is not allowed in standard predictor")
    _check_replicas(predictor)
    _check_mode_specific(release, annotations, predictor)


def _check_mode_change(release: Release, isvc: Obj, old: Obj) -> None:
    rule = release.validator.mode_change
    wanted = (isvc["metadata"].get("annotations") or {}).get(MODE)
    recorded = str((old.get("status") or {}).get("deploymentMode") or "")
    if rule == "none" or wanted is None:
        return
    if rule == "exact" and not recorded:
        return
    if rule == "normalized-empty-allowed" and not recorded:
        return
    if rule.startswith("normalized"):
        recorded = LEGACY_MODES.get(recorded, recorded) or "Standard"
    if recorded != wanted:
        raise Denied(
            f"update rejected: deploymentMode cannot be changed from '{recorded}' to '{wanted}'"
        )


def _check_autoscaler_class(release: Release, annotations: Obj) -> None:
    if AUTOSCALER not in annotations:
        return
    allowed = ["hpa", "external", "keda"] + (["none"] if release.version != "0.15.0" else [])
    if annotations[AUTOSCALER] not in allowed:
        raise Denied(f"[{annotations[AUTOSCALER]}] is not a supported autoscaler class type")


def _check_blocked_env(release: Release, name: str, predictor: Obj) -> None:
    """0.18+: ``validateBlockedEnvVars`` over the ISVC's containers, in KServe's order."""
    worker = predictor.get("workerSpec") or {}
    groups = (
        predictor.get("containers"),
        predictor.get("initContainers"),
        [predictor["model"]] if predictor.get("model") else [],
        worker.get("containers"),
        worker.get("initContainers"),
    )
    for containers in groups:
        for container in containers or []:
            for var in container.get("env") or []:
                if var.get("name") in release.validator.blocked_env:
                    raise Denied(
                        f'the InferenceService "{name}" is invalid: setting {var["name"]} in '
                        f'container "{container.get("name", "")}" is not allowed for security '
                        "reasons"
                    )


def _check_multinode(release: Release, name: str, annotations: Obj, predictor: Obj) -> None:
    worker = predictor.get("workerSpec")
    if worker is None:
        return
    invalid = f'the InferenceService "{name}" is invalid: '
    if len(worker.get("containers") or []) > 1:
        raise Denied(invalid + "setting multiple containers in workerSpec is not allowed")
    model = predictor.get("model")
    if model is not None:
        env = {var.get("name") for var in model.get("env") or []}
        for variable in ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE"):
            if variable in env:
                raise Denied(
                    invalid + f"setting {variable} in environment variables is not allowed"
                )
        if has_unknown_gpu_type(model.get("resources") or {}, annotations):
            raise Denied(invalid + _UNKNOWN_GPU)
        uri = model.get("storageUri")
        if uri is None:
            raise Denied(invalid + "StorageURI must be set for multinode enabled")
        protocol = str(uri).split("://")[0]
        schemes = release.validator.storage_schemes
        if protocol not in schemes:
            quoted = " and ".join(f"'{s}'" for s in schemes)
            raise Denied(invalid + f"Multinode only supports {quoted} Storage Protocol({protocol})")
        got = annotations.get(AUTOSCALER, "")
        if got != release.autoscaler_class:
            raise Denied(
                invalid + f"Multinode only supports '{release.autoscaler_class}' autoscaler({got})"
            )
    minimum = release.validator.min_pipeline
    for key, label, least in (
        ("pipelineParallelSize", "Pipeline", minimum),
        ("tensorParallelSize", "Tensor", 1),
    ):
        size = worker.get(key)
        if size is not None and int(size) < least:
            raise Denied(
                invalid + f"WorkerSpec.{label}ParallelSize cannot be less than {least}({size})"
            )
    for container in worker.get("containers") or []:
        if has_unknown_gpu_type(container.get("resources") or {}, annotations):
            raise Denied(invalid + _UNKNOWN_GPU)


_UNKNOWN_GPU = (
    "Unknown GPU resource type. Set 'serving.kserve.io/gpu-resource-types' annotation to use "
    "custom gpu resource type"
)


def _check_replicas(predictor: Obj) -> None:
    """``ComponentExtensionSpec.Validate``: the replica bounds."""
    low = int(predictor.get("minReplicas", 1))
    high = int(predictor.get("maxReplicas", 0))
    if low < 0:
        raise Denied("'MinReplicas' cannot be less than 0")
    if high < 0:
        raise Denied("'MaxReplicas' cannot be less than 0")
    if low > high and high != 0:
        raise Denied("'MinReplicas' cannot be greater than MaxReplicas")


def _check_mode_specific(release: Release, annotations: Obj, predictor: Obj) -> None:
    """``validateAutoScalingCompExtension``: only the release's raw mode skips the Knative checks.

    In the raw mode the class ``hpa`` gets ``validateScalingHPACompExtension`` (KEDA's checks are
    not told: the chart never asks for KEDA); ``none`` and ``external`` pass.
    """
    if annotations.get(MODE) == release.validator.raw_mode:
        if annotations.get(AUTOSCALER) == "hpa":
            _check_hpa(predictor)
        return
    if predictor.get("deploymentStrategy") is not None:
        raise Denied("customizing deploymentStrategy is only supported for raw deployment mode")


def _check_hpa(predictor: Obj) -> None:
    metric = predictor.get("scaleMetric") or "cpu"
    if metric not in ("cpu", "memory"):
        raise Denied(f"[{metric}] is not a supported metric")
    target = predictor.get("scaleTarget")
    if target is not None:
        if (metric == "cpu" and int(target) < 1) or int(target) > 100:
            raise Denied("the target utilization percentage should be a [1-100] integer")
        if metric == "memory" and int(target) < 1:
            raise Denied("the target memory should be greater than 1 MiB")
    for spec in (predictor.get("autoScaling") or {}).get("metrics") or []:
        if spec.get("type") != "Resource":
            raise Denied(
                f"invalid HPA metric source type with value [{spec.get('type')}],"
                "valid metric source types are Resource"
            )
        if spec.get("resource") is None:
            raise Denied("metricSpec.Resource is not set for resource metric source type")


def gpu_resource_types(annotations: Obj) -> list[str]:
    """``UpdateGPUResourceTypeListByAnnotation``: the standard types plus those declared."""
    raw = annotations.get(GPU_TYPES)
    types = list(KSERVE_DEFAULT_GPU_TYPES)
    if raw:
        declared = _json_array(raw)
        if declared is None:
            raise Denied(
                f"invalid GPU format({raw}) for {GPU_TYPES} annotation: must be a valid JSON array"
            )
        types += [t for t in declared if t not in types]
    return types


def has_unknown_gpu_type(resources: Obj, annotations: Obj) -> bool:
    """``HasUnknownGpuResourceType``: a resource that is neither basic nor a known GPU type."""
    known = gpu_resource_types(annotations)
    names = set((resources.get("limits") or {}) | (resources.get("requests") or {}))
    return any(n not in BASIC_RESOURCES and n not in known for n in names)


def _json_array(raw: str) -> list[str] | None:
    """``IsValidCustomGPUArray``: a non-empty JSON array of non-empty strings."""
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(item, str) and item for item in value):
        return None
    return value


# --- the (Cluster)ServingRuntime validator --------------------------------------------------


def validate_runtime(release: Release, runtime: Obj, existing: list[Obj]) -> None:
    """Raise ``Denied`` as KServe's runtime webhook would, against runtimes of the same kind
    (a ServingRuntime: those of its namespace; a ClusterServingRuntime: all of them)."""
    spec: Obj = runtime.get("spec") or {}
    kind, name = runtime["kind"], runtime["metadata"]["name"]
    if spec.get("disabled"):
        return
    scope = "clusterservingruntime" if kind == "ClusterServingRuntime" else "servingruntime"
    namespace = runtime["metadata"].get("namespace", "")
    previous: Obj = {}
    for other in existing:
        format_name = _differing_priorities(spec)
        if format_name:
            raise Denied(
                f"different priorities assigned for the model format {format_name} "
                f"under the {scope} {name}"
            )
        other_name = other["metadata"]["name"]
        collision = _priority_collision(spec, other.get("spec") or {}, name, other_name)
        if collision:
            where = (
                f"in the clusterservingruntimes {other_name} and {name}"
                if kind == "ClusterServingRuntime"
                else f"in the servingruntimes {other_name} and {name} in namespace {namespace}"
            )
            raise Denied(f"same priority assigned for the model format {collision} {where}")
        if other_name == name:
            previous = other.get("spec") or {}
    problem = _multinode_spec_problem(release, spec, previous)
    if problem:
        raise Denied(f"the {kind} {name} is invalid: {problem}")
    for containers in (spec.get("containers"), (spec.get("workerSpec") or {}).get("containers")):
        for container in containers or []:
            for var in container.get("env") or []:
                if var.get("name") in release.validator.blocked_env:
                    raise Denied(
                        f'the {kind} "{name}" is invalid: setting {var["name"]} in container '
                        f'"{container.get("name", "")}" is not allowed for security reasons'
                    )


def _auto(fmt: Obj) -> bool:
    return bool(fmt.get("autoSelect"))  # IsAutoSelectEnabled: unset is false


def _differing_priorities(spec: Obj) -> str:
    seen: dict[str, Any] = {}
    for fmt in spec.get("supportedModelFormats") or []:
        if not _auto(fmt):
            continue
        if fmt["name"] in seen:
            first, this = seen[fmt["name"]], fmt.get("priority")
            if first is not None and this is not None and first != this:
                return str(fmt["name"])
        else:
            seen[fmt["name"]] = fmt.get("priority")
    return ""


def _priority_collision(new: Obj, other: Obj, new_name: str, other_name: str) -> str:
    """The format name both auto-select with one priority, or "" (protocols must overlap)."""
    if bool(new.get("multiModel")) != bool(other.get("multiModel")):
        return ""
    if other.get("disabled") or new_name == other_name:
        return ""
    protocols = set(new.get("protocolVersions") or [])
    if not protocols & set(other.get("protocolVersions") or []):
        return ""
    for theirs in other.get("supportedModelFormats") or []:
        for ours in new.get("supportedModelFormats") or []:
            same = str(theirs["name"]).lower() == str(ours["name"]).lower() and theirs.get(
                "version"
            ) == ours.get("version")
            priorities = theirs.get("priority"), ours.get("priority")
            both = _auto(theirs) and _auto(ours) and None not in priorities
            if both and same and priorities[0] == priorities[1]:
                return str(ours["name"])
    return ""


def _multinode_spec_problem(release: Release, spec: Obj, previous: Obj) -> str:
    worker = spec.get("workerSpec")
    if previous.get("workerSpec") is not None and worker is None:
        return "removing workerSpec where it already exists is not allowed"
    if worker is None:
        return ""
    if len(worker.get("containers") or []) > 1:
        return "setting multiple containers in workerSpec is not allowed"
    annotations = spec.get("annotations") or {}
    for container in spec.get("containers") or []:
        if container.get("name") != "kserve-container":
            continue
        env = {var.get("name") for var in container.get("env") or []}
        for variable in ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE"):
            if variable in env:
                return f"setting {variable} in environment variables is not allowed"
        if has_unknown_gpu_type(container.get("resources") or {}, annotations):
            return "unknown GPU resource type in a container(kserve-container)"
    workers = worker.get("containers") or [{}]
    if workers[0].get("name") == "worker-container" and has_unknown_gpu_type(
        workers[0].get("resources") or {}, annotations
    ):
        return "unknown GPU resource type in a container(worker-container)"
    return _parallel_size_problem(release, worker)


def _parallel_size_problem(release: Release, worker: Obj) -> str:
    pipeline, tensor = worker.get("pipelineParallelSize"), worker.get("tensorParallelSize")
    if release.requires_parallel_sizes:  # 0.15.0
        if pipeline is None:
            return "pipelineParallelSize must be set when WorkerSpec is set"
        if tensor is None:
            return "tensorParallelSize must be set when WorkerSpec is set"
        if int(pipeline) < 2:
            return (
                f"the WorkerSpec.PipelineParallelSize cannot be less than 2 ({pipeline}) because "
                "WorkerSpec.PipelineParallelSize should include at least 1 head node and 1 "
                "worker node"
            )
    pipeline = 1 if pipeline is None else pipeline
    tensor = 1 if tensor is None else tensor
    if int(pipeline) < 1:
        return f"the WorkerSpec.PipelineParallelSize cannot be less than 1({pipeline})"
    if int(tensor) < 1:
        return f"the WorkerSpec.TensorParallelSize cannot be less than 1({tensor})"
    return ""
