"""The one typed configuration of the runtime, read from the environment KServe injects.

KServe's multi-node reconciler sets the parallel sizes, node and GPU counts, the model location and
the head's service name (see DEVELOPERS.md, "Environment the runtime reads"); the pod declares its
own address through the downward API. Command-line flags override any of them: ``overrides`` maps a
field name to the flag's value, ``None`` meaning "not given".

Not every KServe release injects everything (the chart's ``kserve-releases.yaml`` lists what each
one does): 0.15.0 sets no ``RAY_NODE_COUNT`` nor ``REQUEST_GPU_COUNT``. Both then follow from the
parallel sizes, because the chart gives every pod exactly ``TENSOR_PARALLEL_SIZE`` GPUs and runs
``PIPELINE_PARALLEL_SIZE`` pods; ``Node.derived`` says what was derived, for the supervisor's log.

The executor (``MULTINODE_LLM_EXECUTOR``) picks how vLLM forms the group: ``ray`` (Ray's cluster,
vLLM's Ray executor) or ``mp`` (vLLM's own multi-node executor, KServe 0.18+'s Ray-less mode, where
each pod holds TENSOR_PARALLEL_SIZE GPUs and the group has PIPELINE_PARALLEL_SIZE pods;
docs/executors.md).

Everything here is pure: it reads a mapping and returns frozen dataclasses, or raises ``UserError``
naming the variable and the fix. Nothing touches the network or the file system.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from multinode_llm.errors import UserError

DEFAULT_RAY_PORT = 6379
DEFAULT_WAIT_TIMEOUT_S = 600.0
DEFAULT_HTTP_PORT = 8080
DEFAULT_STATUS_PORT = 8081
DEFAULT_RAY_TEMP_DIR = Path("/tmp/ray")  # noqa: S108 - Ray's own default, inside the pod
# The pod's writable scratch: the chart mounts an emptyDir there, which kubelet keeps across
# container restarts (HOME and Ray's session dir live there too). TMPDIR overrides it.
DEFAULT_SCRATCH_DIR = Path("/tmp")  # noqa: S108 - inside the pod
RESTARTS_FILE_NAME = "multinode-llm-restarts.json"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
RAY = "ray"
MP = "mp"
EXECUTORS = (RAY, MP)
# torch.distributed's TCPStore on the head's rank-0 process in mp mode (vLLM --master-port).
DEFAULT_MASTER_PORT = 29500

Overrides = Mapping[str, object]


@dataclass(frozen=True)
class RayPorts:
    """Ray's ports, pinned so that a NetworkPolicy can open exactly these inside the group."""

    gcs: int = DEFAULT_RAY_PORT
    node_manager: int = 6380
    object_manager: int = 6381
    runtime_env_agent: int = 6382
    dashboard_agent_grpc: int = 6383
    dashboard_agent_listen: int = 6384
    metrics_export: int = 6385
    min_worker: int = 10002
    max_worker: int = 10100


@dataclass(frozen=True)
class Node:
    """What every pod of the group knows about itself."""

    pod_ip: str
    gpus: int  # REQUEST_GPU_COUNT: this pod's GPU limit, given to Ray (accelerator.py)
    node_count: int  # RAY_NODE_COUNT: pods in the group, the head included
    ray_ports: RayPorts
    ray_temp_dir: Path
    wait_timeout_s: float
    status_port: int
    pod_name: str = ""
    pod_namespace: str = ""
    derived: tuple[str, ...] = ()  # "RAY_NODE_COUNT=2 from PIPELINE_PARALLEL_SIZE", for the log
    scratch_dir: Path = DEFAULT_SCRATCH_DIR  # TMPDIR, else /tmp: kept across container restarts
    executor: str = RAY  # MULTINODE_LLM_EXECUTOR: "ray" or "mp" (vLLM's own multi-node executor)
    master_port: int = DEFAULT_MASTER_PORT  # MASTER_PORT: the mp group's TCPStore on the head

    @property
    def mp(self) -> bool:
        return self.executor == MP

    @property
    def restarts_file(self) -> Path:
        """Where the supervisor counts its restarts by cause (health/restarts.py)."""
        return self.scratch_dir / RESTARTS_FILE_NAME


@dataclass(frozen=True)
class Parallelism:
    tensor: int
    pipeline: int

    @property
    def gpus(self) -> int:
        """GPUs the whole group must register before vLLM can place its workers."""
        return self.tensor * self.pipeline


@dataclass(frozen=True)
class HeadConfig:
    node: Node
    parallel: Parallelism
    model: str  # a directory (MODEL_DIR) or a Hub model id (MODEL_ID), given to vLLM's --model
    served_model_names: tuple[str, ...]  # empty: vLLM names the model after --model
    http_port: int = DEFAULT_HTTP_PORT
    early_engine_start: bool = True
    vllm_args: tuple[str, ...] = field(default_factory=tuple)  # passed to vLLM untouched
    isvc_name: str = ""  # INFERENCE_SERVICE_NAME: names the worker pods in messages
    # MODEL_REVISION: the model dir is a staged hf:// model (staging/layout.py); serve the
    # snapshot this revision was staged as, once it is complete.
    model_revision: str = ""
    # MULTINODE_LLM_GROUP_SPEC: the chart's hash of what shapes the group's pods; the head exports
    # it (multinode_llm_group_info), so a waiter tells the new group from the old one.
    group_spec: str = ""

    @property
    def model_is_dir(self) -> bool:
        return self.model.startswith("/")


@dataclass(frozen=True)
class WorkerConfig:
    node: Node
    head_host: str  # DNS name or address of the head's Ray GCS
    isvc_name: str = ""

    @property
    def head_address(self) -> str:
        return f"{self.head_host}:{self.node.ray_ports.gcs}"


def head_config(env: Mapping[str, str], overrides: Overrides) -> HeadConfig:
    """The head's configuration: ``env`` is KServe's environment, ``overrides`` the flags."""
    reader = _Reader(env, overrides)
    node = _node(reader)
    if node.gpus < 1:
        raise UserError(
            f"REQUEST_GPU_COUNT={node.gpus} on the head: vLLM's Ray executor runs its first worker "
            "on the head node, so give the head at least one GPU (set the head's GPU limit)"
        )
    parallel = Parallelism(
        tensor=reader.integer("tensor_parallel_size", "TENSOR_PARALLEL_SIZE", minimum=1),
        pipeline=reader.integer("pipeline_parallel_size", "PIPELINE_PARALLEL_SIZE", minimum=1),
    )
    http_port = reader.port("port", None, DEFAULT_HTTP_PORT)
    if node.mp:
        _check_mp_layout(node, parallel.tensor, parallel.pipeline)
        taken = {http_port: "vLLM's HTTP port (--port)", node.status_port: "the status port"}
        if node.master_port in taken:
            raise UserError(
                f"MASTER_PORT={node.master_port} is also {taken[node.master_port]}: vLLM's "
                "TCPStore needs a port of its own; set MASTER_PORT (group.masterPort) to another "
                f"port, for example {DEFAULT_MASTER_PORT}"
            )
    names = reader.flag("served_model_name")
    if names is None:
        model_name = env.get("MODEL_NAME", "").strip()
        served: tuple[str, ...] = (model_name,) if model_name else ()
    else:
        served = tuple(str(name) for name in _as_list(names))
    return HeadConfig(
        node=node,
        parallel=parallel,
        model=_model(reader),
        served_model_names=served,
        http_port=http_port,
        early_engine_start=bool(reader.flag("early_engine_start", True)),
        vllm_args=tuple(str(arg) for arg in _as_list(reader.flag("vllm_args", ()))),
        isvc_name=env.get("INFERENCE_SERVICE_NAME", "").strip(),
        model_revision=env.get("MODEL_REVISION", "").strip(),
        group_spec=env.get("MULTINODE_LLM_GROUP_SPEC", "").strip(),
    )


def worker_config(env: Mapping[str, str], overrides: Overrides) -> WorkerConfig:
    """The worker's configuration: it finds the head from ``--head-address``, else KServe's
    HEAD_SVC in POD_NAMESPACE, else LeaderWorkerSet's LWS_LEADER_ADDRESS."""
    reader = _Reader(env, overrides)
    node = _node(reader)
    head_host = reader.flag("head_address")
    if head_host is None:
        head_host = _head_host(reader)
    if node.mp:
        # A worker runs no TP/PP flags of its own (the head hands it vLLM's arguments), but
        # KServe injects both sizes on worker pods too: a layout that is not mp's is caught here.
        _check_mp_layout(
            node,
            reader.optional_integer("TENSOR_PARALLEL_SIZE"),
            reader.optional_integer("PIPELINE_PARALLEL_SIZE"),
        )
    return WorkerConfig(node=node, head_host=str(head_host), isvc_name=env.get("ISVC_NAME", ""))


def _head_host(reader: _Reader) -> str:
    """The head's DNS name. KServe's worker pods get HEAD_SVC, the head's Service; a
    LeaderWorkerSet's get LWS_LEADER_ADDRESS, ``<set>-<group>.<set>.<namespace>``, the leader
    pod's name under the set's headless Service (``AddLWSVariables``, pkg/utils/pod/pod_utils.go,
    sigs.k8s.io/lws v0.9.0), which resolves from the pod's search path only: it is made absolute
    here, so that a resolver with other search domains finds it too."""
    domain = reader.env.get("CLUSTER_DOMAIN", "").strip() or DEFAULT_CLUSTER_DOMAIN
    leader = reader.env.get("LWS_LEADER_ADDRESS", "").strip()
    if leader and not reader.env.get("HEAD_SVC", "").strip():
        return f"{leader}.svc.{domain}"
    head_svc = reader.text(
        "HEAD_SVC",
        fix="KServe sets it on worker pods (LeaderWorkerSet sets LWS_LEADER_ADDRESS instead); "
        "or pass --head-address",
    )
    namespace = reader.text(
        "POD_NAMESPACE",
        fix="declare it from the downward API (fieldRef metadata.namespace); "
        "or pass --head-address",
    )
    return f"{head_svc}.{namespace}.svc.{domain}"


def _node(reader: _Reader) -> Node:
    pod_ip = reader.flag("pod_ip")
    if pod_ip is None:
        pod_ip = reader.text(
            "POD_IP",
            fix="declare it from the downward API (fieldRef status.podIP) or pass --pod-ip",
        )
    try:
        ipaddress.ip_address(str(pod_ip))
    except ValueError:
        raise UserError(
            f"POD_IP={pod_ip!r} is not an IP address: set it from the downward API "
            "(fieldRef status.podIP) or pass --pod-ip with this pod's address"
        ) from None
    temp_dir = reader.flag("ray_temp_dir")
    if temp_dir is None:
        temp_dir = reader.env.get("RAY_TEMP_DIR") or DEFAULT_RAY_TEMP_DIR
    derived: list[str] = []
    return Node(
        pod_ip=str(pod_ip),
        gpus=reader.count("gpus", "REQUEST_GPU_COUNT", "TENSOR_PARALLEL_SIZE", 0, derived),
        node_count=reader.count(
            "node_count", "RAY_NODE_COUNT", "PIPELINE_PARALLEL_SIZE", 1, derived
        ),
        ray_ports=RayPorts(gcs=reader.port("ray_port", "RAY_PORT", DEFAULT_RAY_PORT)),
        ray_temp_dir=Path(str(temp_dir)),
        wait_timeout_s=reader.seconds("wait_timeout", "GROUP_WAIT_TIMEOUT", DEFAULT_WAIT_TIMEOUT_S),
        status_port=reader.port("status_port", None, DEFAULT_STATUS_PORT),
        pod_name=reader.env.get("POD_NAME", ""),
        pod_namespace=reader.env.get("POD_NAMESPACE", ""),
        derived=tuple(derived),
        scratch_dir=Path(reader.env.get("TMPDIR", "").strip() or DEFAULT_SCRATCH_DIR),
        executor=reader.executor("executor", "MULTINODE_LLM_EXECUTOR", EXECUTORS, RAY),
        master_port=reader.port("master_port", "MASTER_PORT", DEFAULT_MASTER_PORT),
    )


def _check_mp_layout(node: Node, tensor: int | None, pipeline: int | None) -> None:
    """KServe's mp mode sizes a group as PP pods of TP GPUs each; refuse any other layout.

    vLLM's mp executor splits TP x PP ranks evenly over ``--nnodes`` = PP pods, TP per pod: a pod
    count or GPU count that is Ray's layout (the head's GPUs first, fewer pods) cannot run it.
    """
    fix = (
        "the mp executor needs KServe's mp layout (the ServingRuntime annotation "
        "multinode/executor-backend: mp, KServe 0.18+: chart value group.executor=mp), or set "
        "MULTINODE_LLM_EXECUTOR=ray"
    )
    if tensor is not None and node.gpus != tensor:
        raise UserError(
            f"REQUEST_GPU_COUNT={node.gpus} but TENSOR_PARALLEL_SIZE={tensor}: each pod of an mp "
            f"group holds exactly TENSOR_PARALLEL_SIZE GPUs; {fix}"
        )
    if pipeline is not None and node.node_count != pipeline:
        raise UserError(
            f"RAY_NODE_COUNT={node.node_count} but PIPELINE_PARALLEL_SIZE={pipeline}: an mp group "
            f"has one pod per pipeline stage; {fix}"
        )


def _model(reader: _Reader) -> str:
    flag = reader.flag("model")
    if flag is not None:
        return str(flag)
    for name in ("MODEL_DIR", "MODEL_ID"):
        value = reader.env.get(name, "").strip()
        if value:
            return value
    raise UserError(
        "no model given: set MODEL_DIR (KServe sets it to /mnt/models from a pvc:// or oci:// "
        "storageUri) or MODEL_ID (a Hugging Face model id), or pass --model"
    )


def _as_list(value: object) -> list[object]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


class _Reader:
    """Reads one field: the flag if given, else the environment variable, else a default."""

    def __init__(self, env: Mapping[str, str], overrides: Overrides) -> None:
        self.env = env
        self.overrides = overrides

    def flag(self, name: str, default: object = None) -> object:
        value = self.overrides.get(name)
        return default if value is None else value

    def text(self, variable: str, fix: str) -> str:
        value = self.env.get(variable, "").strip()
        if not value:
            raise UserError(f"{variable} is not set: {fix}")
        return value

    def integer(self, name: str, variable: str, minimum: int) -> int:
        flag = self.flag(name)
        source = f"--{name.replace('_', '-')}" if flag is not None else variable
        raw = flag if flag is not None else self.env.get(variable)
        if raw is None or str(raw).strip() == "":
            raise UserError(
                f"{variable} is not set: KServe injects it from the InferenceService's workerSpec; "
                f"set it to an integer >= {minimum} or pass --{name.replace('_', '-')}"
            )
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise UserError(
                f"{source}={raw!r} is not an integer: set it to an integer >= {minimum}"
            ) from None
        if value < minimum:
            raise UserError(
                f"{source}={value} is less than {minimum}: set it to an integer >= {minimum}"
            )
        return value

    def count(
        self, name: str, variable: str, fallback: str, minimum: int, derived: list[str]
    ) -> int:
        """``variable`` (or its flag); where KServe did not inject it, ``fallback``'s value.

        Each fallback taken is recorded in ``derived``: the log says where a count came from.
        """
        if self.flag(name) is not None or self.env.get(variable, "").strip():
            return self.integer(name, variable, minimum)
        if not self.env.get(fallback, "").strip():
            raise UserError(
                f"neither {variable} nor {fallback} is set: KServe injects them from the "
                f"InferenceService's workerSpec; set {variable} or pass --{name.replace('_', '-')}"
            )
        value = self.integer(name, fallback, minimum)
        derived.append(
            f"{variable}={value} from {fallback} (this KServe release sets no {variable})"
        )
        return value

    def optional_integer(self, variable: str) -> int | None:
        """``variable`` as an integer >= 1, or None when it is not set."""
        if not self.env.get(variable, "").strip():
            return None
        return self.integer(variable.lower(), variable, minimum=1)

    def executor(self, name: str, variable: str, choices: tuple[str, ...], default: str) -> str:
        flag = self.flag(name)
        raw = flag if flag is not None else self.env.get(variable)
        if raw is None or str(raw).strip() == "":
            return default
        value = str(raw).strip().lower()
        if value not in choices:
            source = f"--{name.replace('_', '-')}" if flag is not None else variable
            raise UserError(
                f"{source}={raw!r} is not an executor: set it to one of {', '.join(choices)} "
                f"(default {default})"
            )
        return value

    def port(self, name: str, variable: str | None, default: int) -> int:
        flag = self.flag(name)
        raw = flag if flag is not None else (self.env.get(variable) if variable else None)
        if raw is None or str(raw).strip() == "":
            return default
        source = f"--{name.replace('_', '-')}" if flag is not None else variable
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = -1
        if not 1 <= value <= 65535:
            raise UserError(
                f"{source}={raw!r} is not a TCP port: set it to an integer from 1 to 65535"
            )
        return value

    def seconds(self, name: str, variable: str, default: float) -> float:
        flag = self.flag(name)
        raw = flag if flag is not None else self.env.get(variable)
        if raw is None or str(raw).strip() == "":
            return default
        source = f"--{name.replace('_', '-')}" if flag is not None else variable
        try:
            value = float(str(raw).strip().removesuffix("s"))
        except ValueError:
            value = -1.0
        if value <= 0:
            raise UserError(
                f"{source}={raw!r} is not a positive number of seconds: set it to, for example, 600"
            )
        return value
