"""The refusal table: every bad setting fails `helm template` and `helm lint` (Helm 3 and 4) and
`helm install --dry-run=client` (Helm 4; Helm 3's install contacts the API server before it renders)
with a message that names the value and says what to do.

Rules JSON Schema can say live in values.schema.json (Helm prints the path and the constraint);
cross-field rules live in the chart's "multinode-llm.validate" helper (one line per value to fix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from multinode_llm_testing.chartlib import (
    CHART,
    NAMESPACE,
    RELEASE,
    Render,
    deep_merge,
    install_dry_run,
    run_with_values,
    template,
)

GOOD: dict[str, Any] = {
    "model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
    "parallelism": {"tensor": 2, "pipeline": 2},
}


@dataclass(frozen=True)
class Refusal:
    values: dict[str, Any]
    names: str  # the value the message must name (dotted; Helm 4's schema errors write /a/b)
    says: str = ""  # advice the message must carry (helper refusals)
    schema: bool = False  # refused by values.schema.json rather than the helper
    release: str = RELEASE
    namespace: str = NAMESPACE
    replace: bool = False  # values replace GOOD instead of merging into it


def schema(values: dict[str, Any], names: str) -> Refusal:
    """A value of the wrong type or a key the chart does not have: Helm's schema check, before
    any template."""
    return Refusal(values, names, schema=True)


def limit(values: dict[str, Any], names: str, says: str) -> Refusal:
    """A value out of its limits (values.schema.json "x-limits"): refused with the others by the
    validate template, saying why."""
    return Refusal(values, names, says)


TABLE: dict[str, Refusal] = {
    # parallelism
    "pipeline below 2": limit(
        {"parallelism": {"pipeline": 1}},
        "parallelism.pipeline",
        "parallelism.pipeline=1 must be at least 2: Pipeline parallel size: nodes in the group, "
        "the head included (at least 2; one node belongs to a single-node runtime)",
    ),
    "tensor below 1": limit(
        {"parallelism": {"tensor": 0}},
        "parallelism.tensor",
        "parallelism.tensor=0 must be at least 1: Tensor parallel size: GPUs per node",
    ),
    "fractional tensor": schema({"parallelism": {"tensor": 1.5}}, "parallelism.tensor"),
    "pipeline as a string": schema({"parallelism": {"pipeline": "2"}}, "parallelism.pipeline"),
    "shm size not a quantity": limit(
        {"shm": {"sizeLimit": "lots"}},
        "shm.sizeLimit",
        "shm.sizeLimit=lots must be a Kubernetes quantity",
    ),
    "volume size not a quantity": limit(
        {"model": {"storage": {"size": "1.5 TB"}}},
        "model.storage.size",
        "model.storage.size=1.5 TB must be a Kubernetes quantity",
    ),
    # GPUs
    "unknown gpu type": Refusal(
        {"gpu": {"resourceName": "example.com/gpu"}},
        "gpu.resourceName",
        "add it to gpu.customResourceTypes",
    ),
    "custom gpu type with tensor 2": Refusal(
        {
            "gpu": {
                "resourceName": "nvidia.com/mig-1g.10gb",
                "customResourceTypes": ["nvidia.com/mig-1g.10gb"],
            }
        },
        "gpu.resourceName",
        "use parallelism.tensor=1 with a custom GPU type",
    ),
    "gpus in head resources": Refusal(
        {"head": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
        "head.resources.limits.nvidia.com/gpu",
        "the chart sets GPUs from parallelism.tensor",
    ),
    "undeclared extended resource": Refusal(
        {"worker": {"resources": {"requests": {"rdma/ib": 1}}}},
        "worker.resources.requests.rdma/ib",
        "set rdma.enabled=true and rdma.resources.rdma/ib instead",
    ),
    # env and vLLM arguments
    "TENSOR_PARALLEL_SIZE in head env": Refusal(
        {"head": {"env": [{"name": "TENSOR_PARALLEL_SIZE", "value": "2"}]}},
        "head.env[0]",
        "set parallelism.tensor instead",
    ),
    "PIPELINE_PARALLEL_SIZE in worker env": Refusal(
        {
            "worker": {
                "env": [
                    {"name": "X", "value": "1"},
                    {"name": "PIPELINE_PARALLEL_SIZE", "value": "2"},
                ]
            }
        },
        "worker.env[1]",
        "set parallelism.pipeline instead",
    ),
    "RAY_PORT in worker env": Refusal(
        {"worker": {"env": [{"name": "RAY_PORT", "value": "1"}]}},
        "worker.env[0]",
        "set ray.port instead",
    ),
    "PYTHONPATH in head env": Refusal(
        {"head": {"env": [{"name": "PYTHONPATH", "value": "/x"}]}},
        "head.env[0]",
        "KServe refuses it",
    ),
    "pipeline size in vllm args": Refusal(
        {"vllm": {"args": ["--pipeline-parallel-size", "4"]}},
        "vllm.args[0]",
        "set parallelism.pipeline",
    ),
    "tensor size in vllm args": Refusal(
        {"vllm": {"args": ["--max-model-len=4096", "--tensor-parallel-size=4"]}},
        "vllm.args[1]",
        "set parallelism.tensor",
    ),
    # vLLM flags outside the chart's sizing (tensor x pipeline GPUs, one group)
    "data parallel size in vllm args": Refusal(
        {"vllm": {"args": ["--data-parallel-size=2"]}},
        "vllm.args[0]=--data-parallel-size=2 is outside the chart's sizing",
        "the engine would wait for ranks no pod holds",
    ),
    "data parallel short flag in vllm args": Refusal(
        {"vllm": {"args": ["--max-model-len=4096", "-dp", "2"]}},
        "vllm.args[1]=-dp",
        "serve more copies of the model as more releases",
    ),
    "another data parallel flag in vllm args": Refusal(
        {"vllm": {"args": ["--data_parallel_size_local", "2"]}},
        "vllm.args[0]=--data_parallel_size_local is outside the chart's sizing",
        "data parallelism runs whole copies",
    ),
    "a data parallel flag vllm added later": Refusal(
        {"vllm": {"args": ["--data-parallel-new-mode"]}},
        "vllm.args[0]=--data-parallel-new-mode is outside the chart's sizing",
        "data parallelism runs whole copies",
    ),
    "expert parallel in vllm args": Refusal(
        {"vllm": {"args": ["--enable-expert-parallel"]}},
        "vllm.args[0]=--enable-expert-parallel is outside the chart's sizing",
        "the chart does not size expert parallelism yet",
    ),
    "expert parallel abbreviated in vllm args": Refusal(
        {"vllm": {"args": ["--enable-expert"]}},
        "vllm.args[0]=--enable-expert (vLLM reads it as --enable-expert-parallel)",
        "expert parallelism shards a MoE model's experts",
    ),
    "expert load balancing in vllm args": Refusal(
        {"vllm": {"args": ["--enable-eplb"]}},
        "vllm.args[0]=--enable-eplb",
        "expert load balancing needs expert parallelism",
    ),
    "prefill context parallel in vllm args": Refusal(
        {"vllm": {"args": ["-pcp=2"]}},
        "vllm.args[0]=-pcp=2",
        "prefill context parallelism multiplies the ranks of the group",
    ),
    "served name abbreviated in vllm args": Refusal(
        {"vllm": {"args": ["--served", "x"]}},
        "vllm.args[0]=--served (vLLM reads it as --served-model-name)",
        "set model.name",
    ),
    "nnodes short flag in vllm args": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["-n", "2"]}},
        "vllm.args[0]=-n",
        "the runtime sets --nnodes to parallelism.pipeline",
    ),
    # the executor (group.executor, docs/executors.md)
    "unknown executor": limit(
        {"group": {"executor": "torchrun"}},
        "group.executor",
        "group.executor=torchrun must be one of ray, mp: How the nodes form one vLLM engine",
    ),
    "master port below 1024": limit(
        {"group": {"executor": "mp", "masterPort": 80}},
        "group.masterPort",
        "group.masterPort=80 must be at least 1024",
    ),
    "mp on kserve 0.17": Refusal(
        {"group": {"executor": "mp"}, "kserve": {"version": "0.17"}},
        "group.executor",
        "which KServe 0.17.1 lacks",
    ),
    "mp on kserve 0.15.0": Refusal(
        {"group": {"executor": "mp"}, "kserve": {"version": "0.15.0"}},
        "group.executor",
        "upgrade KServe to a release the chart supports with it (0.18.0, 0.18.1, 0.19.0)",
    ),
    "ray port with mp": Refusal(
        {"group": {"executor": "mp"}, "ray": {"port": 7000}},
        "ray.port",
        "leave ray.port at 6379, or use group.executor=ray",
    ),
    "ray env with mp": Refusal(
        {"group": {"executor": "mp"}, "worker": {"env": [{"name": "RAY_TEMP_DIR", "value": "/x"}]}},
        "worker.env[0]",
        "remove it from worker.env, or use group.executor=ray",
    ),
    "ray vllm option with mp": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["--ray_workers_use_nsight"]}},
        "vllm.args[0]",
        "a Ray option of vLLM",
    ),
    "master port on the status port": Refusal(
        {"group": {"executor": "mp", "masterPort": 8081}},
        "group.masterPort",
        "the supervisor's status port; pick another port",
    ),
    "master port with ray": Refusal(
        {"group": {"masterPort": 29600}},
        "group.masterPort",
        "leave group.masterPort at 29500, or set group.executor=mp",
    ),
    "executor backend in vllm args": Refusal(
        {"vllm": {"args": ["--distributed-executor-backend=mp"]}},
        "vllm.args[0]",
        "set group.executor (ray or mp)",
    ),
    "nnodes in vllm args": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["--nnodes", "2"]}},
        "vllm.args[0]",
        "the runtime sets it to parallelism.pipeline",
    ),
    "node rank in vllm args": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["--node-rank=1"]}},
        "vllm.args[0]",
        "the head hands each worker its rank",
    ),
    "master addr in vllm args": Refusal(
        {"vllm": {"args": ["--max-model-len=4096", "--master_addr", "10.0.0.1"]}},
        "vllm.args[1]",
        "the runtime sets it to the head's pod IP",
    ),
    "master port in vllm args": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["--master-port=29501"]}},
        "vllm.args[0]",
        "set group.masterPort",
    ),
    "headless in vllm args": Refusal(
        {"group": {"executor": "mp"}, "vllm": {"args": ["--headless"]}},
        "vllm.args[0]",
        "the runtime runs the workers headless",
    ),
    "MASTER_PORT in head env": Refusal(
        {"group": {"executor": "mp"}, "head": {"env": [{"name": "MASTER_PORT", "value": "1"}]}},
        "head.env[0]",
        "set group.masterPort instead",
    ),
    "MULTINODE_LLM_EXECUTOR in worker env": Refusal(
        {"worker": {"env": [{"name": "MULTINODE_LLM_EXECUTOR", "value": "mp"}]}},
        "worker.env[0]",
        "set group.executor instead",
    ),
    # keys the chart writes, repeated in a user map (test_owned_keys.py checks every one)
    "deployment mode annotation by hand": Refusal(
        {"inferenceService": {"annotations": {"serving.kserve.io/deploymentMode": "Serverless"}}},
        "inferenceService.annotations.serving.kserve.io/deploymentMode=Serverless",
        "kserve.version decides it",
    ),
    "autoscaler class annotation by hand": Refusal(
        {"inferenceService": {"annotations": {"serving.kserve.io/autoscalerClass": "hpa"}}},
        "inferenceService.annotations.serving.kserve.io/autoscalerClass=hpa",
        "inferenceService.autoscalerClass decides it",
    ),
    "usage stats in head env": Refusal(
        {"head": {"env": [{"name": "VLLM_NO_USAGE_STATS", "value": "0"}]}},
        "head.env[0] sets VLLM_NO_USAGE_STATS",
        "the chart turns vLLM's usage reports off",
    ),
    "executor annotation in pod annotations": Refusal(
        {"podAnnotations": {"multinode/executor-backend": "mp"}},
        "podAnnotations.multinode/executor-backend",
        "set group.executor instead",
    ),
    # storage
    "missing model uri": Refusal(
        {"parallelism": {"tensor": 1, "pipeline": 2}},
        "model.uri",
        "model.uri is required",
        replace=True,
    ),
    "hf uri without a name": Refusal(
        {"model": {"uri": "hf://Qwen"}}, "model.uri", "use hf://ORG/NAME"
    ),
    "hf uri with three parts": Refusal(
        {"model": {"uri": "hf://Qwen/Qwen2.5/extra"}}, "model.uri", "use hf://ORG/NAME"
    ),
    "hf revision with a slash": Refusal(
        {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct:refs/pr/1"}},
        "model.uri",
        "the revision may not contain '/'",
    ),
    "s3 uri": Refusal(
        {"model": {"uri": "s3://bucket/llama"}},
        "model.uri",
        "use hf://ORG/NAME (the chart stages it",
    ),
    "oci uri on kserve 0.15": Refusal(
        {"model": {"uri": "oci://r.example.com/m:1"}, "kserve": {"version": "0.15"}},
        "model.uri",
        "oci:// multi-node works from KServe 0.18 (0.15 admits only pvc://)",
    ),
    "malformed pvc uri": Refusal(
        {"model": {"uri": "pvc://Models_Claim/llama"}}, "model.uri", "use pvc://CLAIM/PATH"
    ),
    "volume without ReadWriteMany": Refusal(
        {"model": {"storage": {"accessModes": ["ReadWriteOnce"]}}},
        "model.storage.accessModes",
        "add ReadWriteMany",
    ),
    "existing claim with a pvc uri": Refusal(
        {"model": {"uri": "pvc://models/llama", "storage": {"existingClaim": "models"}}},
        "model.storage.existingClaim",
        "set model.uri=pvc://models/PATH",
    ),
    # the model cache
    "model cache in the release whose download Job would use it": Refusal(
        {"modelCache": {"enabled": True}},
        "modelCache.enabled",
        "run the cache in its own release",
    ),
    "model cache run and pointed at at once": Refusal(
        {
            "model": {"uri": "pvc://models/llama"},
            "modelCache": {"enabled": True, "endpoint": "http://hub:8090"},
        },
        "modelCache.endpoint",
        "unset modelCache.endpoint, or set modelCache.enabled=false",
    ),
    "storage container without the cache": Refusal(
        {"modelCache": {"storageContainer": {"enabled": True}}},
        "modelCache.storageContainer.enabled",
        "set modelCache.enabled=true",
    ),
    "store below 1Gi": Refusal(
        {
            "model": {"uri": "pvc://models/llama"},
            "modelCache": {"enabled": True, "store": {"size": "512Mi"}},
        },
        "modelCache.store.size",
        "is below 1Gi",
    ),
    "store size without a unit": limit(
        {"modelCache": {"store": {"size": "500"}}},
        "modelCache.store.size",
        "modelCache.store.size=500 must be a size with a unit the cache reads too",
    ),
    "store size in GB": limit(
        {"modelCache": {"store": {"size": "500GB"}}},
        "modelCache.store.size",
        "modelCache.store.size=500GB must be a size with a unit the cache reads too",
    ),
    "store size in a unit the cache cannot read": limit(
        {"modelCache": {"store": {"size": "1Pi"}}},
        "modelCache.store.size",
        "modelCache.store.size=1Pi must be a size with a unit the cache reads too",
    ),
    "unknown store type": limit(
        {"modelCache": {"store": {"type": "pvc"}}},
        "modelCache.store.type",
        "modelCache.store.type=pvc must be one of emptyDir, hostPath",
    ),
    "relative hostPath store": limit(
        {"modelCache": {"store": {"hostPath": "var/cache"}}},
        "modelCache.store.hostPath",
        "modelCache.store.hostPath=var/cache must be an absolute directory",
    ),
    "storage container for s3": limit(
        {"modelCache": {"storageContainer": {"uriFormats": [{"prefix": "s3://"}]}}},
        "modelCache.storageContainer.uriFormats",
        "modelCache.storageContainer.uriFormats[0].prefix=s3:// must be a prefix that starts "
        "with hf:// (the cache speaks only the Hub's protocol)",
    ),
    "storage container regex not anchored at hf://": limit(
        {"modelCache": {"storageContainer": {"uriFormats": [{"regex": "hf://org/.*"}]}}},
        "modelCache.storageContainer.uriFormats",
        "modelCache.storageContainer.uriFormats[0].regex=hf://org/.* must be a regex that starts "
        "with ^hf://",
    ),
    "upstream without a scheme": limit(
        {"modelCache": {"upstream": "huggingface.co"}},
        "modelCache.upstream",
        "modelCache.upstream=huggingface.co must be an http(s) URL without a query or fragment",
    ),
    "upstream with a query": limit(
        {"modelCache": {"upstream": "https://huggingface.co/?a=1"}},
        "modelCache.upstream",
        "modelCache.upstream=https://huggingface.co/?a=1 must be an http(s) URL without a query",
    ),
    "typo inside modelCache": schema({"modelCache": {"enable": True}}, "enable"),
    # replicas, modes, autoscaler, version
    "two heads": limit(
        {"inferenceService": {"minReplicas": 2}},
        "inferenceService.minReplicas",
        "inferenceService.minReplicas=2 must be 1: Head replicas. Must be 1: extra heads would "
        "stand outside the Ray cluster",
    ),
    "max replicas 3": limit(
        {"inferenceService": {"maxReplicas": 3}},
        "inferenceService.maxReplicas",
        "inferenceService.maxReplicas=3 must be 1: Maximum head replicas. Must be 1: one group "
        "per InferenceService is KServe's rule",
    ),
    "serverless mode": limit(
        {"kserve": {"deploymentMode": "Serverless"}},
        "kserve.deploymentMode",
        'kserve.deploymentMode=Serverless must be one of "" (empty), RawDeployment, Standard',
    ),
    "knative mode": limit(
        {"kserve": {"deploymentMode": "Knative"}},
        "kserve.deploymentMode",
        'kserve.deploymentMode=Knative must be one of "" (empty), RawDeployment, Standard',
    ),
    "Standard mode before 0.16": Refusal(
        {"kserve": {"version": "0.15.2", "deploymentMode": "Standard"}},
        "kserve.deploymentMode",
        "wants RawDeployment",
    ),
    "hpa autoscaler": Refusal(
        {"inferenceService": {"autoscalerClass": "hpa"}},
        "inferenceService.autoscalerClass",
        'only with autoscaler class "none"',
    ),
    "external autoscaler on 0.18": Refusal(
        {"kserve": {"version": "0.18"}, "inferenceService": {"autoscalerClass": "external"}},
        "inferenceService.autoscalerClass",
        'only with autoscaler class "none"',
    ),
    "none autoscaler on 0.15.0": Refusal(
        {"kserve": {"version": "0.15.0"}, "inferenceService": {"autoscalerClass": "none"}},
        "inferenceService.autoscalerClass",
        'only with autoscaler class "external"',
    ),
    "unknown autoscaler": limit(
        {"inferenceService": {"autoscalerClass": "fast"}},
        "inferenceService.autoscalerClass",
        "inferenceService.autoscalerClass=fast must be one of",
    ),
    "kserve 0.20 deletes the workers": Refusal(
        {"kserve": {"version": "0.20"}}, "kserve.version", "kserve#6113). Refused; use 0.19.0"
    ),
    "kserve 0.14": Refusal(
        {"kserve": {"version": "0.14"}}, "kserve.version", "upgrade KServe to 0.15 or later"
    ),
    "kserve version not a version": limit(
        {"kserve": {"version": "latest"}},
        "kserve.version",
        "kserve.version=latest must be empty or a release as MAJOR.MINOR or MAJOR.MINOR.PATCH",
    ),
    # typos and names
    "unknown top-level key": schema({"modle": {"uri": "hf://a/b"}}, "modle"),
    "typo inside parallelism": schema({"parallelism": {"tensors": 2}}, "tensors"),
    "typo inside a probe": schema(
        {"head": {"probes": {"startup": {"failureTreshold": 9}}}}, "failureTreshold"
    ),
    "unknown strategy": limit(
        {"strategy": {"type": "BlueGreen"}},
        "strategy.type",
        "strategy.type=BlueGreen must be one of Recreate, RollingUpdate: How KServe replaces the "
        "group on a change",
    ),
    "release name too long": Refusal(
        {},
        "InferenceService name",
        "use a shorter release name or set fullnameOverride",
        release="a-release-name-that-is-much-too-long-for-kserve",
    ),
    # <isvc>-predictor-<namespace> is KServe's URL host: 64 characters (18 + 1 + "-multinode-llm"
    # + "-predictor-" + 20) fail its reconcile (tests/cluster/test_findings.py: 63 are hosted).
    "name and namespace past a DNS label": Refusal(
        {},
        "InferenceService name",
        "shorten the release name (or fullnameOverride) or the namespace by 1 characters",
        release="r" * 19,
        namespace="audit-long-namespace",
    ),
    "name ending in -predictor": Refusal(
        {"fullnameOverride": "suffix-predictor"},
        "fullnameOverride",
        "choose a release name or fullnameOverride that does not end in -predictor",
    ),
    # placement and network (docs/placement.md)
    "rdma without devices": Refusal(
        {"rdma": {"enabled": True}}, "rdma.enabled", "set rdma.resources to the resource"
    ),
    "rdma device that is a gpu": Refusal(
        {"rdma": {"enabled": True, "resources": {"nvidia.com/gpu": 1}}},
        "rdma.resources.nvidia.com/gpu",
        "list only RDMA device resources in rdma.resources",
    ),
    "rdma device named like a gpu": Refusal(
        {"rdma": {"enabled": True, "resources": {"example.com/gpu-slice": 1}}},
        "rdma.resources.example.com/gpu-slice",
        "list only RDMA device resources",
    ),
    "rdma device that is the custom gpu type": Refusal(
        {
            "parallelism": {"tensor": 1},
            "gpu": {
                "resourceName": "example.com/accel",
                "customResourceTypes": ["example.com/accel"],
            },
            "rdma": {"enabled": True, "resources": {"example.com/accel": 1}},
        },
        "rdma.resources.example.com/accel",
        "the chart requests GPUs from gpu.resourceName",
    ),
    "rdma device also in worker resources": Refusal(
        {
            "rdma": {"enabled": True, "resources": {"rdma/ib": 1}},
            "worker": {"resources": {"limits": {"rdma/ib": 1}}},
        },
        "worker.resources.limits.rdma/ib",
        "remove it from worker.resources",
    ),
    "rdma with nccl ib disabled": Refusal(
        {
            "rdma": {"enabled": True, "resources": {"rdma/ib": 1}},
            "communication": {"ncclIbDisable": True},
        },
        "communication.ncclIbDisable",
        "set communication.ncclIbDisable=false",
    ),
    "NCCL_IB_HCA in head env": Refusal(
        {"head": {"env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]}},
        "head.env[0]",
        "set rdma.hca instead",
    ),
    "rdma settings with rdma off": Refusal(
        {"rdma": {"ipcLock": True}}, "rdma.ipcLock", "set rdma.enabled=true, or unset rdma.ipcLock"
    ),
    "rdma count zero": limit(
        {"rdma": {"enabled": True, "resources": {"rdma/ib": 0}}},
        "rdma.resources",
        "rdma.resources.rdma/ib=0 must be at least 1",
    ),
    "rdma resource without a domain": Refusal(
        {"rdma": {"enabled": True, "resources": {"hostdev": 1}}},
        "rdma.resources.hostdev",
        "write the resource your RDMA device plugin advertises",
    ),
    "secondary networks on the host network": Refusal(
        {"hostNetwork": True, "secondaryNetworks": ["ib-net"]},
        "secondaryNetworks",
        "Multus would attach none of them",
    ),
    "secondary network not a name": limit(
        {"secondaryNetworks": ["IB Net"]},
        "secondaryNetworks",
        "secondaryNetworks[0]=IB Net must be a NetworkAttachmentDefinition",
    ),
    "pod label kserve sets": Refusal(
        {"podLabels": {"component": "x"}}, "podLabels.component", "use another key"
    ),
    "pod label the chart sets": Refusal(
        {"podLabels": {"app.kubernetes.io/instance": "x"}},
        "podLabels.app.kubernetes.io/instance",
        "use another key",
    ),
    "pod label also an isvc label": Refusal(
        {"podLabels": {"team": "a"}, "inferenceService": {"labels": {"team": "b"}}},
        "podLabels.team",
        "set it in one of them",
    ),
    "multus annotation by hand": Refusal(
        {"podAnnotations": {"k8s.v1.cni.cncf.io/networks": "ib-net"}},
        "podAnnotations.k8s.v1.cni.cncf.io/networks",
        "set secondaryNetworks instead",
    ),
    "pod annotation kserve drops": Refusal(
        {"podAnnotations": {"autoscaling.knative.dev/min-scale": "1"}},
        "podAnnotations.autoscaling.knative.dev/min-scale",
        "KServe drops this annotation",
    ),
    "pod annotation kserve owns": Refusal(
        {"podAnnotations": {"serving.kserve.io/gpu-resource-types": "[]"}},
        "podAnnotations.serving.kserve.io/gpu-resource-types",
        "set the chart value that decides it",
    ),
    "extra volume named like the chart's": Refusal(
        {"extraVolumes": [{"name": "dshm", "emptyDir": {}}, {"name": "shm", "emptyDir": {}}]},
        "extraVolumes[1].name=shm",
        "give the volume another name",
    ),
    "extra volume named like kserve's": Refusal(
        {"extraVolumes": [{"name": "kserve-pvc-source", "emptyDir": {}}]},
        "extraVolumes[0].name=kserve-pvc-source",
        "KServe's model volume",
    ),
    "extra mount over the scratch": Refusal(
        {
            "extraVolumes": [{"name": "x", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "x", "mountPath": "/tmp"}],
        },
        "extraVolumeMounts[0].mountPath=/tmp",
        "mount it elsewhere",
    ),
    "extra mount over the model": Refusal(
        {
            "extraVolumes": [{"name": "x", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "x", "mountPath": "/mnt/models/"}],
        },
        "extraVolumeMounts[0].mountPath=/mnt/models/",
        "KServe's model mount",
    ),
    "extra mount of no volume": Refusal(
        {"extraVolumeMounts": [{"name": "missing", "mountPath": "/mnt/x"}]},
        "extraVolumeMounts[0].name=missing",
        "add the volume to extraVolumes",
    ),
    "extra mount path not absolute": limit(
        {
            "extraVolumes": [{"name": "x", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "x", "mountPath": "data"}],
        },
        "extraVolumeMounts",
        "extraVolumeMounts[0].mountPath=data must be an absolute path",
    ),
    "topology spread selecting other pods": Refusal(
        {
            "head": {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {
                            "matchLabels": {"app": "isvc.llm-multinode-llm-predictor-worker"}
                        },
                    }
                ]
            }
        },
        "head.topologySpreadConstraints[0].labelSelector.matchLabels",
        "matches no head pod of this group",
    ),
    "topology spread on one generation": Refusal(
        {
            "worker": {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"isvc.generation": "1"}},
                    }
                ]
            }
        },
        "worker.topologySpreadConstraints[0].labelSelector.matchLabels.isvc.generation",
        "use matchLabelKeys: [isvc.generation]",
    ),
    "topology spread without a key": schema(
        {
            "worker": {
                "topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]
            }
        },
        "worker.topologySpreadConstraints",
    ),
    "pod and service monitors together": Refusal(
        {"monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}},
        "monitoring.serviceMonitor.enabled",
        "enable one of them",
    ),
    # the compile caches (docs/compile-cache.md)
    "compile cache size not a byte quantity": limit(
        {"compileCache": {"sizeLimit": "10 GB"}},
        "compileCache.sizeLimit",
        "compileCache.sizeLimit=10 GB must be a size the runtime reads too",
    ),
    "shared compile cache size in millibytes": limit(
        {"compileCache": {"shared": {"sizeLimit": "500m"}}},
        "compileCache.shared.sizeLimit",
        "compileCache.shared.sizeLimit=500m must be a size the runtime reads too",
    ),
    "compile cache typo": schema({"compileCache": {"size": "1Gi"}}, "compileCache"),
    "shared compile cache for a model on no claim": Refusal(
        {
            "model": {"uri": "oci://registry.example/models/qwen:1"},
            "kserve": {"version": "0.18"},
            "compileCache": {"shared": {"enabled": True}},
        },
        "compileCache.shared.enabled",
        "set compileCache.shared.enabled=false (each pod keeps its own compile cache)",
    ),
    "shared compile cache without the pod's own": Refusal(
        {"compileCache": {"enabled": False, "shared": {"enabled": True}}},
        "compileCache.shared.enabled",
        "set compileCache.enabled=true, or compileCache.shared.enabled=false",
    ),
    "shared compile cache at an absolute path": Refusal(
        {"compileCache": {"shared": {"enabled": True, "path": "/cache"}}},
        "compileCache.shared.path=/cache",
        "give a relative path",
    ),
    "shared compile cache stepping out of the claim": Refusal(
        {"compileCache": {"shared": {"enabled": True, "path": "cache/../../etc"}}},
        "compileCache.shared.path=cache/../../etc",
        "give a relative path without them",
    ),
    "shared compile cache path with an empty folder": Refusal(
        {"compileCache": {"shared": {"enabled": True, "path": "cache//vllm"}}},
        "compileCache.shared.path",
        "joined by single '/'",
    ),
    "shared compile cache holding the model": Refusal(
        {
            "model": {"uri": "pvc://models/cache/llama"},
            "compileCache": {"shared": {"enabled": True, "path": "cache"}},
        },
        "compileCache.shared.path=cache",
        "a folder beside the model's",
    ),
    "shared compile cache inside the staged model": Refusal(
        {
            "model": {"storage": {"path": "qwen"}},
            "compileCache": {"shared": {"enabled": True, "path": "qwen/compile"}},
        },
        "compileCache.shared.path=qwen/compile",
        "a folder beside the model's",
    ),
    "compile cache key in worker env": Refusal(
        {"worker": {"env": [{"name": "MULTINODE_LLM_COMPILE_CACHE_KEY", "value": "x"}]}},
        "worker.env[0] sets MULTINODE_LLM_COMPILE_CACHE_KEY",
        "the chart computes it",
    ),
    "extra volume named like the compile cache": Refusal(
        {"extraVolumes": [{"name": "compile-cache-shared", "emptyDir": {}}]},
        "extraVolumes[0].name=compile-cache-shared",
        "the chart's shared compile cache (compileCache.shared)",
    ),
    "extra mount over the compile cache": Refusal(
        {
            "extraVolumes": [{"name": "mine", "emptyDir": {}}],
            "extraVolumeMounts": [
                {"name": "mine", "mountPath": "/var/cache/multinode-llm/compile/"}
            ],
        },
        "extraVolumeMounts[0].mountPath=/var/cache/multinode-llm/compile/",
        "the chart's compile cache (compileCache)",
    ),
    # the way in (docs/traffic.md)
    "ingress on a cache-only release": Refusal(
        {"modelCache": {"enabled": True}, "traffic": {"ingress": {"enabled": True}}},
        "traffic.ingress.enabled",
        "there is no group to route to",
        replace=True,
    ),
    "http route attached to no gateway": Refusal(
        {"traffic": {"httpRoute": {"enabled": True}}},
        "traffic.httpRoute.parentRefs",
        "--set traffic.httpRoute.parentRefs[0].name=",
    ),
    "ingress certificate for a host it does not serve": Refusal(
        {
            "traffic": {
                "ingress": {
                    "enabled": True,
                    "hosts": ["llm.example.com"],
                    "tls": [{"hosts": ["api.example.com"], "secretName": "tls"}],
                }
            }
        },
        "traffic.ingress.tls[0].hosts",
        "add api.example.com to traffic.ingress.hosts",
    ),
    "route path outside the head's routes": limit(
        {"traffic": {"paths": ["/v1/../metrics"]}},
        "traffic.paths[0]=/v1/../metrics",
        "none of them '.' or '..'",
    ),
    "route path without its slash": limit(
        {"traffic": {"paths": ["v1"]}}, "traffic.paths[0]=v1", "must be a URL path from '/'"
    ),
    "no route path": limit(
        {"traffic": {"paths": []}}, "traffic.paths", "traffic.paths=[] must list at least 1 item"
    ),
    "request timeout in bare seconds": limit(
        {"traffic": {"httpRoute": {"requestTimeout": "600"}}},
        "traffic.httpRoute.requestTimeout=600",
        "must be empty or a Gateway API duration",
    ),
    "request timeout as a number": schema(
        {"traffic": {"httpRoute": {"requestTimeout": 600}}}, "traffic.httpRoute.requestTimeout"
    ),
    "gateway named by a key the api lacks": schema(
        {"traffic": {"httpRoute": {"parentRefs": [{"gateway": "inference-gateway"}]}}},
        "traffic.httpRoute.parentRefs",
    ),
    "gateway name in capitals": limit(
        {"traffic": {"httpRoute": {"parentRefs": [{"name": "Inference"}]}}},
        "traffic.httpRoute.parentRefs[0].name=Inference",
        "must be a Gateway's name",
    ),
    "ingress host with a port": limit(
        {"traffic": {"ingress": {"hosts": ["llm.example.com:443"]}}},
        "traffic.ingress.hosts[0]=llm.example.com:443",
        "with no port",
    ),
    "group wait beyond the startup budget": Refusal(
        {"group": {"waitTimeoutSeconds": 3600}},
        "group.waitTimeoutSeconds",
        "lower group.waitTimeoutSeconds",
    ),
    # group.backend=lws (the CRD's presence and age are checked on a cluster: tests/cluster)
    "unknown backend": limit({"group": {"backend": "lws2"}}, "group.backend", "kserve"),
    "several groups on kserve": Refusal(
        {"groups": {"replicas": 2}}, "groups.replicas=2", "set group.backend=lws"
    ),
    "an hpa on kserve": Refusal(
        {"groups": {"autoscaling": {"enabled": True, "metrics": [{"type": "Pods"}]}}},
        "groups.autoscaling.enabled",
        "set group.backend=lws",
    ),
    "an hpa with no metric": Refusal(
        {"group": {"backend": "lws"}, "groups": {"autoscaling": {"enabled": True}}},
        "groups.autoscaling.metrics",
        "vllm_num_requests_waiting",
    ),
    "an hpa floor above its ceiling": Refusal(
        {
            "group": {"backend": "lws"},
            "groups": {
                "autoscaling": {
                    "enabled": True,
                    "minReplicas": 3,
                    "maxReplicas": 2,
                    "metrics": [{"type": "Pods"}],
                }
            },
        },
        "groups.autoscaling.minReplicas=3",
        "raise maxReplicas",
    ),
    "lws rollout that can neither stop nor start": Refusal(
        {"group": {"backend": "lws"}, "groups": {"rollout": {"maxUnavailable": 0}}},
        "groups.rollout.maxUnavailable=0",
        "maxUnavailable=1",
    ),
    "lws with a rolling kserve strategy": Refusal(
        {"group": {"backend": "lws"}, "strategy": {"type": "RollingUpdate"}},
        "strategy.type=RollingUpdate",
        "set groups.rollout",
    ),
    "lws with a cluster-scoped runtime": Refusal(
        {"group": {"backend": "lws"}, "runtime": {"scope": "Cluster"}},
        "runtime.scope=Cluster",
        "leave runtime.scope at Namespace",
    ),
    # llmInferenceServicePresets
    "presets for a release without LLMInferenceService": Refusal(
        {"kserve": {"version": "0.15.2"}, "llmInferenceServicePresets": {"enabled": True}},
        "llmInferenceServicePresets.enabled",
        "0.16 or later",
    ),
    "a preset prefix KServe 0.16 cannot read": Refusal(
        {
            "kserve": {"version": "0.16.0"},
            "llmInferenceServicePresets": {"enabled": True, "namePrefix": "team-"},
        },
        "llmInferenceServicePresets.namePrefix=team-",
        "set namePrefix to kserve-",
    ),
    "presets alone for an unverified release": Refusal(
        {"kserve": {"version": "0.21.0"}, "llmInferenceServicePresets": {"enabled": True}},
        "llmInferenceServicePresets.enabled",
        "kserve.allowUnverifiedRelease=true",
        replace=True,
    ),
    "a preset prefix that is no name's start": limit(
        {"llmInferenceServicePresets": {"enabled": True, "namePrefix": "Team_"}},
        "llmInferenceServicePresets.namePrefix",
        "ending in '-'",
    ),
    "lws with an s3 model": Refusal(
        {"group": {"backend": "lws"}, "model": {"uri": "s3://bucket/model"}},
        "model.uri=s3://bucket/model",
        "pvc://CLAIM/PATH",
    ),
    "lws with inference service labels": Refusal(
        {"group": {"backend": "lws"}, "inferenceService": {"labels": {"team": "a"}}},
        "inferenceService.labels",
        "set podLabels",
    ),
    "lws pod names beyond a hostname": Refusal(
        {"group": {"backend": "lws"}, "fullnameOverride": "a" * 60},
        "the LeaderWorkerSet name",
        "fullnameOverride",
    ),
}


def values_of(refusal: Refusal) -> dict[str, Any]:
    return refusal.values if refusal.replace else deep_merge(GOOD, refusal.values)


def named(message: str, path: str) -> bool:
    """True when the message names the value: dotted (helpers, Helm 3) or /slashed (Helm 4
    schema errors)."""
    return path in message or "/" + path.replace(".", "/") in message


def check(refusal: Refusal, returncode: int, stderr: str) -> None:
    assert returncode != 0, "rendered although it should have been refused"
    assert named(stderr, refusal.names), stderr
    if refusal.schema:
        assert "values don't meet the specifications of the schema" in stderr, stderr
    else:
        assert "value(s) to fix" in stderr, stderr
        assert refusal.says in stderr, stderr


def test_the_good_values_render(major: str) -> None:
    assert template(major, values=GOOD).returncode == 0


@pytest.mark.parametrize("case", sorted(TABLE))
def test_helm_template_refuses(major: str, case: str) -> None:
    refusal = TABLE[case]
    render = template(
        major, values=values_of(refusal), release=refusal.release, namespace=refusal.namespace
    )
    check(refusal, render.returncode, render.stderr)


@pytest.mark.parametrize("case", sorted(TABLE))
def test_helm_install_dry_run_refuses(helm4: str, case: str) -> None:
    refusal = TABLE[case]
    result = install_dry_run(
        helm4, values=values_of(refusal), release=refusal.release, namespace=refusal.namespace
    )
    check(refusal, result.returncode, result.stderr)


def lint(major: str, values: dict[str, Any]) -> Render:
    return run_with_values(major, ["lint", "--strict", str(CHART)], None, values)


def lint_output(result: Render) -> str:
    """What helm lint printed, with the message unquoted: lint names the chart's refusal as a
    missing template (Go quotes the name), so its newlines and quotes arrive escaped."""
    text = result.stdout + result.stderr
    return text.replace("\\n", "\n").replace('\\"', '"')


@pytest.mark.parametrize("case", sorted(TABLE))
def test_helm_lint_refuses_what_helm_template_refuses(major: str, case: str) -> None:
    refusal = TABLE[case]
    if refusal.release != RELEASE or refusal.namespace != NAMESPACE:
        pytest.skip("helm lint takes no release name (it lints as RELEASE-NAME in default)")
    result = lint(major, values_of(refusal))
    output = lint_output(result)
    assert result.returncode != 0, output
    assert "1 chart(s) failed" in output, output
    assert named(output, refusal.names), output
    if not refusal.schema:
        assert "value(s) to fix" in output, output
        assert refusal.says in output, output


def test_helm_lint_passes_the_good_values(major: str) -> None:
    result = lint(major, GOOD)
    assert result.returncode == 0, lint_output(result)


VALIDATE = "templates/validate/values.yaml"


def helm_render_order(paths: list[str]) -> list[str]:
    """The order Helm renders templates in (sortTemplates, pkg/engine/engine.go): more folders
    first, then names in reverse order."""
    return sorted(paths, key=lambda path: (path.count("/"), path), reverse=True)


def test_the_validate_template_renders_before_every_other_template() -> None:
    # A template rendered before it would meet the bad values first and fail with Go's own error
    # (a nil pointer, say) instead of the chart's reasons.
    templates = [
        f"multinode-llm/{p.relative_to(CHART)}"
        for p in (CHART / "templates").rglob("*")
        if p.is_file() and not p.name.startswith("_") and p.suffix in (".yaml", ".tpl", ".txt")
    ]
    assert helm_render_order(templates)[0] == f"multinode-llm/{VALIDATE}"


def test_the_refusal_comes_from_the_validate_template_alone(major: str) -> None:
    # kserve.version=0.14 has no entry in the table: a template that read it before the check
    # would fail on a nil pointer.
    render = template(major, values=deep_merge(GOOD, {"kserve": {"version": "0.14"}}))
    assert render.returncode != 0
    assert f"execution error at (multinode-llm/{VALIDATE}:" in render.stderr, render.stderr
    assert render.stderr.count("value(s) to fix") == 1, render.stderr


def test_vllm_flags_the_chart_neither_owns_nor_refuses_reach_vllm(major: str) -> None:
    args = ["--max-model-len=4096", "--decode-context-parallel-size", "2", "--dp-sync-interval=1"]
    render = template(major, values=deep_merge(GOOD, {"vllm": {"args": args}}))
    isvc = render.one("InferenceService")
    assert isvc["spec"]["predictor"]["model"]["args"][2:] == args


def test_helm_install_dry_run_accepts_the_good_values(helm4: str) -> None:
    result = install_dry_run(helm4, values=GOOD)
    assert result.returncode == 0, result.stderr
    assert "kind: InferenceService" in result.stdout


def test_every_value_to_fix_is_reported_at_once(major: str) -> None:
    bad = {
        "model": {"uri": "hf://Qwen"},
        "gpu": {"resourceName": "example.com/gpu"},
        "image": {"repository": "registry.example.com/multinode-llm-accel"},  # for that GPU
        "head": {"env": [{"name": "TENSOR_PARALLEL_SIZE", "value": "1"}]},
    }
    render = template(major, values=deep_merge(GOOD, bad))
    assert "3 value(s) to fix" in render.stderr, render.stderr
