"""The local cluster's state directory: the plan ``up`` wrote, the status the kubelet keeps, logs.

One directory per network prefix (``/run/multinode-llm/<prefix>`` unless
``MULTINODE_LLM_LOCAL_STATE`` names another root), because the prefix is what makes a cluster
unique on this machine: its namespaces, bridge and addresses all carry it.

    cluster.json   the plan: network, pods with their containers, the port forward (written by up)
    status.json    pods, containers, readiness, restarts, events (rewritten by the kubelet)
    kubelet.pid    the kubelet daemon's process id
    kubelet.log    the daemon's own log
    pods/<pod>/    each pod's container logs (``<container>-<restart>.log``) and emptyDir volumes
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm_local.pods import PodPlan

Obj = dict[str, Any]


def state_root() -> Path:
    return Path(os.environ.get("MULTINODE_LLM_LOCAL_STATE", "/run/multinode-llm"))


@dataclass(frozen=True)
class Forward:
    """A host port forwarded to a Service's ready endpoints (``kubectl port-forward svc/...``)."""

    host: str
    port: int
    service: str
    role: str  # pods of this role back the service (when no selector is given)
    target_port: int
    selector: dict[str, str] = field(default_factory=dict)  # the Service's pod selector


@dataclass(frozen=True)
class ClusterPlan:
    """What ``up`` decided: the network and the pods, in a form the kubelet daemon can run."""

    prefix: str
    subnet: str
    release: str
    namespace: str
    isvc: str
    pods: list[PodPlan]
    forward: Forward
    services: dict[str, list[str]] = field(default_factory=dict)  # DNS name -> pod IPs
    kserve: str = ""  # the KServe release this cluster runs (kserve-releases.yaml)
    started: float = 0.0  # when the Deployments' rollouts began (time.time())
    groups: list[Obj] = field(default_factory=list)  # each InferenceService's Deployments

    @property
    def url(self) -> str:
        return f"http://{self.forward.host}:{self.forward.port}/v1"

    def to_json(self) -> Obj:
        data = asdict(self)
        data["pods"] = [pod.to_json() for pod in self.pods]
        return data

    @classmethod
    def from_json(cls, data: Obj) -> ClusterPlan:
        return cls(
            **{
                **data,
                "pods": [PodPlan.from_json(p) for p in data["pods"]],
                "forward": Forward(**data["forward"]),
            }
        )


class ClusterState:
    """Paths and small reads/writes of one cluster's state directory."""

    def __init__(self, prefix: str, root: Path | None = None) -> None:
        self.prefix = prefix
        self.directory = (root or state_root()) / prefix
        self.plan_file = self.directory / "cluster.json"
        self.status_file = self.directory / "status.json"
        self.pid_file = self.directory / "kubelet.pid"
        self.log_file = self.directory / "kubelet.log"
        self.pods_dir = self.directory / "pods"

    def pod_dir(self, pod: str) -> Path:
        return self.pods_dir / pod

    def write_plan(self, plan: ClusterPlan) -> None:
        write_json(self.plan_file, plan.to_json())

    def load_plan(self) -> ClusterPlan | None:
        data = read_json(self.plan_file)
        return ClusterPlan.from_json(data) if data else None

    def load_status(self) -> Obj:
        return read_json(self.status_file) or {}

    def kubelet_pid(self) -> int | None:
        """The daemon's pid when it is alive, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def write_json(path: Path, data: Any) -> None:
    """Write atomically: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    temporary.replace(path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
