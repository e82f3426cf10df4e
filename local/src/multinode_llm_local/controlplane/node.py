"""The node agent: this project's stand-in for a kubelet with a container runtime (a fake).

One agent per node of the real cluster, all in the node daemon (``daemon.py``). Each registers
its Node (fake GPUs: ``nvidia.com/gpu`` capacity, and CPU and memory the scheduler may hand out,
all on this one machine), renews its Lease, and watches the pods the real scheduler binds to it,
through the real API server with the node's own identity (``system:node:NAME``, so the Node
authorizer and NodeRestriction judge what it reads and writes). For each pod it does what a
kubelet does for the fields this project's pods use:

- a network namespace on the cluster's bridge with an address from the node's podCIDR, its
  ``/etc/hosts`` and a ``resolv.conf`` for CoreDNS (``network.py``);
- volumes: emptyDir, configMap, secret, projected (the service-account token from the
  TokenRequest API, ``kube-root-ca.crt``, the namespace), downwardAPI, hostPath, and
  persistentVolumeClaim through the bound PersistentVolume (waiting until it is bound);
- the environment: env and envFrom, the downward API, and the Service variables
  (``KUBERNETES_SERVICE_HOST``, ``<NAME>_SERVICE_HOST``, ... as enableServiceLinks gives them);
- init containers in order, then the containers, each run by the emulated kubelet's
  ``ContainerRunner`` (``kubelet.py``): probes, restarts with back-off, restartPolicy;
- the pod's status (phase, conditions, container statuses, ``podIP``) patched as it changes, Events
  for what it does, and graceful deletion: SIGTERM, the grace period, then the final delete.

Images are not pulled: ``runtime.py`` says what each one is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import logging
import platform
import shutil
import time
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import runtime
from multinode_llm_local.controlplane.api import Api, ApiError, Obj
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_local.k8s import quantity
from multinode_llm_local.kubelet import ContainerRunner
from multinode_llm_local.pods import ContainerPlan, PodIdentity, PodPlan, plan_pod

log = logging.getLogger("multinode_llm_local.controlplane.node")
GPU_RESOURCE = "nvidia.com/gpu"
LEASE_S = 40
RENEW_S = 10.0
STATUS_S = 60.0
STATUS_DEBOUNCE_S = 0.2
CLAIM_RETRY_S = 2.0
# A pod whose containers cannot be made yet is tried again after 1 s, then twice as long each
# time up to 10 s (kubelet resyncs a pod that failed to start every few seconds).
PLAN_RETRY_FIRST_S, PLAN_RETRY_MAX_S = 1.0, 10.0
AGENT_VERSION = "multinode-llm-local://0.1.0"
T = TypeVar("T")


_BACKGROUND: set[asyncio.Task[Any]] = set()


def spawn(coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coroutine`` in the background, keeping a reference until it is done (the event loop
    keeps only a weak one)."""
    task = asyncio.ensure_future(coroutine)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    return task


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeAgent:
    """One node: its registration, heartbeats and pods."""

    def __init__(
        self,
        api: Api,
        name: str,
        info: Mapping[str, Any],
        network: ClusterNetwork,
        state_dir: Path,
    ) -> None:
        self.api = api
        self.name = name
        self.info = info
        self.network = network
        self.state_dir = state_dir
        self.workers: dict[str, PodWorker] = {}
        self.addresses: dict[str, str] = {}  # pod IP -> the uid of the pod holding it
        self.last_address = -1  # allocation goes round the podCIDR, as host-local IPAM does
        self.finished: set[str] = set()  # uids whose pods this agent has torn down
        self.pod_cidr: ipaddress.IPv4Network | None = None
        self.node_uid = ""
        self.stopping = False

    async def run(self) -> None:
        await self.register()
        await asyncio.gather(self._heartbeat(), self._watch_pods())

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.gather(*(w.terminate(None) for w in list(self.workers.values())))

    # -- the node -------------------------------------------------------------------------

    def capacity(self) -> dict[str, str]:
        return {
            "cpu": str(self.info["cpus_per_node"]),
            "memory": str(self.info["memory_per_node"]),
            "pods": "110",
            "ephemeral-storage": "100Gi",
            GPU_RESOURCE: str(self.info["gpus_per_node"]),
        }

    async def register(self) -> None:
        path = f"/api/v1/nodes/{self.name}"
        node = await self.api.get(path)
        if node is None:
            labels = {
                "kubernetes.io/hostname": self.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
            }
            node = await self.api.create(
                "/api/v1/nodes", {"metadata": {"name": self.name, "labels": labels}}
            )
        self.node_uid = node["metadata"]["uid"]
        await self._post_status()
        await self._renew_lease()

    async def _post_status(self) -> None:
        stamp = now()
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"Kubelet{reason}",
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
            for kind, reason, message in (
                ("MemoryPressure", "HasSufficientMemory", "kubelet has sufficient memory"),
                ("DiskPressure", "HasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "HasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "the node agent (a stand-in for kubelet) is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
        status = {
            "capacity": self.capacity(),
            "allocatable": self.capacity(),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.network.bridge_ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self.name,
                "systemUUID": self.node_uid,
                "bootID": self.node_uid,
                "kernelVersion": platform.release(),
                "osImage": "multinode-llm local node",
                "containerRuntimeVersion": AGENT_VERSION,
                "kubeletVersion": self.info["kubernetes"],
                "kubeProxyVersion": self.info["kubernetes"],
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        node = await self.api.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            {"status": status},
            "application/strategic-merge-patch+json",
        )
        cidr = (node.get("spec") or {}).get("podCIDR")
        if cidr:
            self.pod_cidr = ipaddress.IPv4Network(cidr)

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_S,
            "renewTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.node_uid}
        try:
            await self.api.merge_patch(path, {"spec": spec})
        except ApiError as error:
            if error.code != 404:
                raise
            await self.api.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {"metadata": {"name": self.name, "ownerReferences": [owner]}, "spec": spec},
            )

    async def _heartbeat(self) -> None:
        last_status = time.monotonic()
        while not self.stopping:
            await asyncio.sleep(RENEW_S)
            try:
                await self._renew_lease()
                if time.monotonic() - last_status >= STATUS_S or self.pod_cidr is None:
                    await self._post_status()
                    last_status = time.monotonic()
            except (ApiError, OSError) as error:
                log.warning("%s: heartbeat failed: %s", self.name, error)

    # -- pods -----------------------------------------------------------------------------

    async def _watch_pods(self) -> None:
        params = {"fieldSelector": f"spec.nodeName={self.name}"}
        async for kind, pod in self.api.watch("/api/v1/pods", params):
            if self.stopping:
                return
            uid = pod["metadata"]["uid"]
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker is not None:
                    spawn(worker.terminate(0, final_delete=False))
                continue
            if worker is None:
                if uid in self.finished:
                    continue  # torn down already: this is its last update before it goes
                if pod["status"].get("phase") in ("Succeeded", "Failed"):
                    continue  # finished before this agent started: nothing to run
                if pod["metadata"].get("deletionTimestamp"):
                    spawn(self.finish_deletion(pod))  # never started here: nothing to stop
                    continue
                worker = PodWorker(self, pod)
                self.workers[uid] = worker
                spawn(worker.start())
            worker.pod = pod
            if pod["metadata"].get("deletionTimestamp"):
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                spawn(worker.terminate(grace))

    async def pod_network(self) -> ipaddress.IPv4Network:
        """The node's podCIDR, once the controller manager's node-IPAM has given it one."""
        while self.pod_cidr is None:
            node = await self.api.get(f"/api/v1/nodes/{self.name}")
            cidr = ((node or {}).get("spec") or {}).get("podCIDR")
            if cidr:
                self.pod_cidr = ipaddress.IPv4Network(cidr)
            else:
                await asyncio.sleep(0.5)
        return self.pod_cidr

    def allocate_ip(self, uid: str) -> str:
        """A free address of the podCIDR for pod ``uid``: the next after the last one given (an
        address just released is not handed out again at once, as host-local IPAM does not, so
        that a peer still talking to the old pod cannot reach the new one by mistake)."""
        if self.pod_cidr is None:
            raise UserError(f"node {self.name} has no podCIDR yet")
        hosts = list(self.pod_cidr.hosts())[1:]  # .1: a node's gateway, by convention
        for step in range(1, len(hosts) + 1):
            index = (self.last_address + step) % len(hosts)
            address = str(hosts[index])
            if address not in self.addresses:
                self.addresses[address] = uid
                self.last_address = index
                return address
        raise UserError(f"node {self.name}'s podCIDR {self.pod_cidr} is full")

    def release_ip(self, address: str, uid: str) -> None:
        if address and self.addresses.get(address) == uid:
            del self.addresses[address]

    async def finish_deletion(self, pod: Obj) -> None:
        """The last step of a graceful deletion, a kubelet's: delete the object for good."""
        meta = pod["metadata"]
        self.finished.add(meta["uid"])
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiError, OSError):
            await self.api.delete(path, body)

    def event(self, pod: Obj, reason: str, message: str, warning: bool = False) -> None:
        """An Event about ``pod`` (what `kubectl describe` shows), fire and forget."""
        meta = pod["metadata"]
        stamp = now()
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": self.name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        log.info("%s/%s %s: %s", meta["namespace"], meta["name"], reason, message)

        async def post() -> None:
            with contextlib.suppress(ApiError, OSError):
                await self.api.create(f"/api/v1/namespaces/{meta['namespace']}/events", event)

        spawn(post())


class PodWorker:
    """One pod on a node: network, volumes, containers, status (the PodHost of its runners)."""

    def __init__(self, agent: NodeAgent, pod: Obj) -> None:
        self.agent = agent
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.directory = agent.state_dir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.ip = ""
        self.netns = ""
        self.plan: PodPlan | None = None
        self.init_runners: list[ContainerRunner] = []
        self.runners: list[ContainerRunner] = []
        self.init_done = False
        self.sandbox_ready = False
        self.failure = ""  # why the pod's containers cannot be made (CreateContainerConfigError)
        self.waiting: dict[str, tuple[str, str]] = {}  # container -> (reason, message)
        self.started_at = time.time()
        self.transitions: dict[str, tuple[str, str]] = {}  # condition -> (status, since)
        self._stopping = False
        self._terminated = asyncio.Event()
        self._dirty = asyncio.Event()
        self._status_task: asyncio.Task[None] | None = None

    # PodHost, for ContainerRunner
    @property
    def stopping(self) -> bool:
        return self._stopping

    def event(self, pod: PodPlan, container: str, reason: str, message: str) -> None:
        warning = reason in ("Unhealthy", "BackOff", "Killing", "Failed")
        where = f"container {container}: " if container else ""
        self.agent.event(self.pod, reason, where + message, warning=warning)

    def changed(self) -> None:
        self._dirty.set()

    async def sleep(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._terminated.wait(), seconds)
        return self._stopping

    # lifecycle
    async def start(self) -> None:
        self._status_task = spawn(self._status_loop())
        try:
            await self._make_sandbox()
        except UserError as error:
            self._failed(error)
            return
        plan = await self._planned()
        if plan is None or self._stopping:  # deleted meanwhile: terminate() saw no network
            await self._remove_network()
            return
        self.plan = plan
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "pod.json").write_text(json.dumps(plan.to_json()))
        spec = self.pod["spec"]
        policy = spec.get("restartPolicy", "Always")
        init_names = [c["name"] for c in spec.get("initContainers") or []]
        by_name = {c.name: c for c in plan.containers}
        self.init_runners = [ContainerRunner(self, plan, by_name[n]) for n in init_names]
        self.runners = [ContainerRunner(self, plan, by_name[c["name"]]) for c in spec["containers"]]
        for runner in self.init_runners:
            code = await runner.run("OnFailure" if policy == "Always" else policy)
            if code != 0 or self._stopping:
                self.changed()
                return
        self.init_done = True
        self.changed()
        results = await asyncio.gather(*(r.run(policy) for r in self.runners))
        log.info("%s/%s: containers finished %s", self.namespace, self.name, results)
        self.changed()
        if not self._stopping:
            await self._remove_network()

    async def _planned(self) -> PodPlan | None:
        """The pod's plan, tried again until it can be made, as kubelet's pod worker retries a
        pod whose containers it cannot create: an image not there, a claim's folder that a Job
        is still filling, an object still to come, or an API error (the node authorizer refuses
        a node its pod's objects until its graph has seen the pod bound there). The reason stays
        in the pod's status until it goes. None once the pod is deleted."""
        delay = PLAN_RETRY_FIRST_S
        while True:
            try:
                plan = await self._plan()
            except (UserError, ApiError) as error:
                self._failed(error)
                if await self.sleep(delay):
                    return None
                delay = min(delay * 2, PLAN_RETRY_MAX_S)
                continue
            if self.failure:
                self.failure = ""
                self.waiting.clear()
                self.changed()
            return plan

    def _failed(self, error: UserError | ApiError) -> None:
        if str(error) != self.failure:  # one event per reason, as kubelet's are aggregated
            self.failure = str(error)
            self.agent.event(self.pod, "Failed", self.failure, warning=True)
        self.changed()

    async def terminate(self, grace: float | None, final_delete: bool = True) -> None:
        """Stop the pod's containers (SIGTERM, then SIGKILL after ``grace``), remove its
        network, and, for a graceful deletion, delete the pod object for good."""
        if self._stopping:
            return
        self._stopping = True
        self._terminated.set()
        if grace is None:
            grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        runners = [*self.init_runners, *self.runners]
        await asyncio.gather(*(r.stop(float(grace)) for r in runners), return_exceptions=True)
        await self._remove_network()
        if self._status_task is not None:
            self._status_task.cancel()
        self.agent.finished.add(self.uid)
        if final_delete:
            await self.agent.finish_deletion(self.pod)
        self.agent.workers.pop(self.uid, None)
        # Its logs stay (state_dir/pods/...) for whoever debugs a test; its volumes go.
        shutil.rmtree(self.directory / "volumes", ignore_errors=True)

    async def _remove_network(self) -> None:
        """The pod's namespace and address go (once: a finished Job's pod is deleted later)."""
        if self.netns:
            await asyncio.to_thread(self.agent.network.detach, self.uid)
            self.netns = ""
        self.agent.release_ip(self.ip, self.uid)

    async def _make_sandbox(self) -> None:
        await self.agent.pod_network()
        self.ip = self.agent.allocate_ip(self.uid)
        spec = self.pod["spec"]
        search = (
            []
            if spec.get("dnsPolicy") == "Default"
            else self.agent.network.search_domains(self.namespace)
        )
        hostname = spec.get("hostname") or self.name
        self.netns = await asyncio.to_thread(
            self.agent.network.attach, self.uid, self.ip, hostname, search
        )
        self.sandbox_ready = True
        self.changed()

    async def _plan(self) -> PodPlan:
        spec = self.pod["spec"]
        meta = self.pod["metadata"]
        objects = await self._objects(spec)
        claims = await self._claims(spec)
        token = await self._token(spec)
        containers = [*(spec.get("initContainers") or []), *spec["containers"]]
        imaged = [self._with_image(container) for container in containers]
        identity = PodIdentity(
            name=self.name,
            namespace=self.namespace,
            ip=self.ip,
            netns=self.netns,
            role=meta.get("labels", {}).get("component", ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            directory=self.directory,
            gpus=_gpus(spec["containers"]),
            host_ip=self.agent.network.bridge_ip,
            uid=self.uid,
            node_name=self.agent.name,
            service_account=spec.get("serviceAccountName", "default"),
            token=token,
        )
        services = await self._service_env(spec)
        with_services = [_with_env(c, services) for c, _ in imaged]
        own_roots = frozenset(c["name"] for c, image in imaged if image.rootfs)
        plan = plan_pod(identity, {**spec, "containers": with_services}, objects, claims, own_roots)
        roots = {c["name"]: image for c, image in imaged}
        return _with_roots(plan, roots)

    def _with_image(self, container: Obj) -> tuple[Obj, runtime.Image]:
        """The container as its image would run it: the image's entrypoint where the pod names
        no command, the image's user where neither pod nor container names one."""
        try:
            image = runtime.resolve(
                container.get("image", ""),
                self.agent.info["programs"],
                self.agent.info["kserve"],
                self.agent.state_dir / "images",
                self.agent.info.get("lws", ""),
                runtime.provided(self.agent.state_dir),
                self.agent.info.get("llmisvc", ""),
            )
        except runtime.ImageUnavailableError as error:
            self.waiting[container["name"]] = ("ErrImagePull", str(error))
            raise UserError(str(error)) from None
        result = dict(container)
        if not result.get("command"):
            result["command"] = list(image.entrypoint)
        security = dict(result.get("securityContext") or {})
        pod_security = self.pod["spec"].get("securityContext") or {}
        if image.user is not None and "runAsUser" not in security | pod_security:
            security["runAsUser"] = image.user
            security.setdefault("runAsGroup", image.user)
            result["securityContext"] = security
        return result, image

    async def _objects(self, spec: Obj) -> list[Obj]:
        """The ConfigMaps and Secrets the pod's volumes and env name (optional ones may lack)."""
        wanted: set[tuple[str, str]] = set()
        for volume in spec.get("volumes") or []:
            if "configMap" in volume:
                wanted.add(("configmaps", volume["configMap"]["name"]))
            if "secret" in volume:
                wanted.add(("secrets", volume["secret"]["secretName"]))
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "configMap" in source:
                    wanted.add(("configmaps", source["configMap"]["name"]))
                if "secret" in source:
                    wanted.add(("secrets", source["secret"]["name"]))
        for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
            for source in container.get("envFrom") or []:
                if "configMapRef" in source:
                    wanted.add(("configmaps", source["configMapRef"]["name"]))
                if "secretRef" in source:
                    wanted.add(("secrets", source["secretRef"]["name"]))
            for var in container.get("env") or []:
                value_from = var.get("valueFrom") or {}
                if "configMapKeyRef" in value_from:
                    wanted.add(("configmaps", value_from["configMapKeyRef"]["name"]))
                if "secretKeyRef" in value_from:
                    wanted.add(("secrets", value_from["secretKeyRef"]["name"]))
        found = []
        for resource, name in sorted(wanted):
            obj = await self.agent.api.get(f"/api/v1/namespaces/{self.namespace}/{resource}/{name}")
            if obj is not None:
                obj.setdefault("kind", "ConfigMap" if resource == "configmaps" else "Secret")
                found.append(obj)
        return found

    async def _claims(self, spec: Obj) -> dict[str, Path]:
        """Each claim the pod mounts -> its bound volume's directory, once the claim is bound."""
        claims: dict[str, Path] = {}
        for volume in spec.get("volumes") or []:
            if "persistentVolumeClaim" not in volume:
                continue
            name = volume["persistentVolumeClaim"]["claimName"]
            claims[name] = await self._bound_directory(name)
        return claims

    async def _bound_directory(self, claim: str) -> Path:
        told = False
        while not self._stopping:
            pvc = await self.agent.api.get(
                f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{claim}"
            )
            volume = ((pvc or {}).get("spec") or {}).get("volumeName")
            if pvc is not None and volume and pvc["status"].get("phase") == "Bound":
                pv = await self.agent.api.get(f"/api/v1/persistentvolumes/{volume}")
                path = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
                if not path:
                    raise UserError(
                        f"claim {claim!r} is bound to {volume}, which is not a hostPath volume: "
                        "the node agent mounts only those"
                    )
                return Path(path)
            if not told:
                why = "does not exist" if pvc is None else "is not bound yet"
                self.agent.event(
                    self.pod, "FailedMount", f"persistentvolumeclaim {claim!r} {why}", True
                )
                told = True
            await asyncio.sleep(CLAIM_RETRY_S)
        raise UserError("the pod is being deleted")

    async def _token(self, spec: Obj) -> str:
        """A bound service-account token, when a projected volume asks for one."""
        wants = [
            source["serviceAccountToken"]
            for volume in spec.get("volumes") or []
            for source in (volume.get("projected") or {}).get("sources") or []
            if "serviceAccountToken" in source
        ]
        if not wants:
            return ""
        account = spec.get("serviceAccountName", "default")
        request = {
            "spec": {
                "expirationSeconds": int(wants[0].get("expirationSeconds", 3607)),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.name,
                    "uid": self.uid,
                },
            }
        }
        if wants[0].get("audience"):
            request["spec"]["audiences"] = [wants[0]["audience"]]
        answer = await self.agent.api.create(
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token", request
        )
        return str(answer["status"]["token"])

    async def _service_env(self, spec: Obj) -> list[Obj]:
        """The Service variables a kubelet adds (the ``kubernetes`` Service's always)."""
        services: list[Obj] = []
        if spec.get("enableServiceLinks", True):
            listed = await self.agent.api.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/services"
            )
            services = listed.get("items") or []
        if self.namespace != "default":
            kubernetes = await self.agent.api.get("/api/v1/namespaces/default/services/kubernetes")
            services += [kubernetes] if kubernetes else []
        env: list[Obj] = []
        for service in services:
            address = service["spec"].get("clusterIP")
            ports = service["spec"].get("ports") or []
            if not address or address == "None" or not ports:
                continue
            name = service["metadata"]["name"].upper().replace("-", "_")
            env += [
                {"name": f"{name}_SERVICE_HOST", "value": address},
                {"name": f"{name}_SERVICE_PORT", "value": str(ports[0]["port"])},
            ]
            for port in ports:
                protocol = port.get("protocol", "TCP")
                key = f"{name}_PORT_{port['port']}_{protocol}"
                env += [
                    {"name": key, "value": f"{protocol.lower()}://{address}:{port['port']}"},
                    {"name": f"{key}_PROTO", "value": protocol.lower()},
                    {"name": f"{key}_PORT", "value": str(port["port"])},
                    {"name": f"{key}_ADDR", "value": address},
                ]
                if port.get("name"):
                    named = f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"
                    env.append({"name": named, "value": str(port["port"])})
            env.append({"name": f"{name}_PORT", "value": f"tcp://{address}:{ports[0]['port']}"})
        return env

    # status
    async def _status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.sleep(STATUS_DEBOUNCE_S)
            if self._stopping:
                return
            try:
                await self.agent.api.request(
                    "PATCH",
                    f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
                    {"status": self.status()},
                    "application/strategic-merge-patch+json",
                )
            except ApiError as error:
                if error.code == 404:
                    return
                log.warning("%s/%s: status update failed: %s", self.namespace, self.name, error)
            except OSError as error:
                log.warning("%s/%s: status update failed: %s", self.namespace, self.name, error)

    def status(self) -> Obj:
        spec = self.pod["spec"]
        init_statuses = [
            self._container_status(c, self._runner(self.init_runners, c["name"]))
            for c in spec.get("initContainers") or []
        ]
        statuses = [
            self._container_status(c, self._runner(self.runners, c["name"]))
            for c in spec["containers"]
        ]
        phase = self._phase(init_statuses, statuses)
        ready = bool(statuses) and all(s["ready"] for s in statuses) and phase == "Running"
        conditions = [
            self._condition("PodReadyToStartContainers", self.sandbox_ready),
            self._condition("Initialized", self.init_done or not init_statuses),
            self._condition("ContainersReady", ready),
            self._condition("Ready", ready),
        ]
        status: Obj = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": self.agent.network.bridge_ip,
            "hostIPs": [{"ip": self.agent.network.bridge_ip}],
            "startTime": rfc3339(self.started_at),
            "containerStatuses": statuses,
        }  # no qosClass: the API server's, set at creation and immutable (a kubelet repeats it)
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        if self.ip:
            status.update(podIP=self.ip, podIPs=[{"ip": self.ip}])
        return status

    def _phase(self, init_statuses: list[Obj], statuses: list[Obj]) -> str:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        failed_init = any(
            s["state"].get("terminated", {}).get("exitCode", 0) != 0 for s in init_statuses
        )
        if failed_init and policy == "Never":
            return "Failed"
        if not self.init_done:
            return "Pending"
        if any("running" in s["state"] for s in statuses):
            return "Running"
        terminated = [s["state"].get("terminated") for s in statuses]
        if terminated and all(terminated) and policy != "Always":
            codes = [t["exitCode"] for t in terminated if t]
            if all(code == 0 for code in codes):
                return "Succeeded"
            if policy == "Never":
                return "Failed"
        return (
            "Running"
            if any(s["restartCount"] or s["state"].get("terminated") for s in statuses)
            else "Pending"
        )

    def _condition(self, kind: str, true: bool) -> Obj:
        value = "True" if true else "False"
        previous = self.transitions.get(kind)
        if previous is None or previous[0] != value:
            previous = (value, now())
            self.transitions[kind] = previous
        return {"type": kind, "status": value, "lastTransitionTime": previous[1]}

    @staticmethod
    def _runner(runners: list[ContainerRunner], name: str) -> ContainerRunner | None:
        return next((r for r in runners if r.plan.name == name), None)

    def _container_status(self, container: Obj, runner: ContainerRunner | None) -> Obj:
        base = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
        }
        if runner is None:
            reason, message = self.waiting.get(
                container["name"],
                ("CreateContainerConfigError", self.failure)
                if self.failure
                else ("ContainerCreating", ""),
            )
            return {**base, "state": {"waiting": {"reason": reason, "message": message[:1024]}}}
        current = runner.status
        state: Obj
        if current["state"] == "running":
            state = {"running": {"startedAt": rfc3339(current["started_at"])}}
        elif current["state"] == "terminated" and current["last_state"]:
            state = {"terminated": _terminated(current["last_state"])}
        else:
            state = {"waiting": {"reason": current["reason"] or "ContainerCreating"}}
        status = {
            **base,
            "containerID": f"local://{current['init_pid'] or current['pid'] or 0}",
            "ready": bool(current["ready"]),
            "started": bool(current["started"]),
            "restartCount": int(current["restarts"]),
            "state": state,
        }
        if current["last_state"] and "terminated" not in state:
            status["lastState"] = {"terminated": _terminated(current["last_state"])}
        return status


def _terminated(last: Mapping[str, Any]) -> Obj:
    return {
        "exitCode": int(last["exit_code"]),
        "reason": last["reason"],
        "startedAt": rfc3339(last["started_at"]),
        "finishedAt": rfc3339(last["finished_at"]),
    }


def _gpus(containers: list[Obj]) -> int:
    total = 0
    for container in containers:
        limits = (container.get("resources") or {}).get("limits") or {}
        if GPU_RESOURCE in limits:
            total += int(quantity(limits[GPU_RESOURCE], GPU_RESOURCE))
    return total


def _with_env(container: Obj, services: list[Obj]) -> Obj:
    """The Service variables first: the container's own env wins on a name, as in a kubelet."""
    own = {var["name"] for var in container.get("env") or []}
    extra = [var for var in services if var["name"] not in own]
    return {**container, "env": [*extra, *(container.get("env") or [])]}


def _with_roots(plan: PodPlan, roots: Mapping[str, runtime.Image]) -> PodPlan:
    containers: list[ContainerPlan] = []
    for container in plan.containers:
        image = roots[container.name]
        if image.rootfs:
            env = {k: v for k, v in container.env.items() if k != "PATH"}
            env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            container = replace(container, rootfs=image.rootfs, env=env)
        elif image.paths or image.env:  # a provided image: its ENV first, the pod's wins
            env = {**image.env, **container.env}
            container = replace(container, env=env, image_paths=list(image.paths))
        containers.append(container)
    return replace(plan, containers=containers)
