"""The cluster suite's helpers: a real cluster per KServe release, real kubectl and helm against it.

A real cluster (``multinode-llm-local cluster up``) is a real API server, controller manager,
scheduler, kube-proxy, CoreDNS and KServe manager, built from their Go modules; only the nodes are
stand-ins (``multinode_llm_local.controlplane.node``: fake kubelets with mocked GPUs). One runs at
a time on the machine (``CLUSTER_LOCK``), and its vLLM groups hold the machine-wide vLLM lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm.config import DEFAULT_STATUS_PORT as STATUS_PORT
from multinode_llm_local import cluster as local_cluster
from multinode_llm_local.controlplane import cluster as real
from multinode_llm_local.controlplane import kserve as real_kserve
from multinode_llm_local.controlplane import runtime
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_local.controlplane.provisioner import STORAGE_CLASS
from multinode_llm_local.kserve import releases
from multinode_llm_local.kubelet import enter_command
from multinode_llm_local.pods import PodPlan, make_readable
from multinode_llm_testing import gateway_api, prometheus_operator, storage_sites
from multinode_llm_testing import serving_checks as checks
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.job_pod import IMAGE_ENV
from multinode_llm_testing.locks import file_lock, vllm_lock
from multinode_llm_testing.pod_processes import processes_in
from multinode_llm_testing.serving_checks import RAY_NODES_SCRIPT, check_ray, parse_ray_nodes
from multinode_llm_testing.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "multinode-llm"
TOOLS = ROOT / ".tools" / "bin"
CLUSTER_LOCK = Path("/tmp/multinode-llm-real-cluster.lock")
PREFIX = real.DEFAULT_PREFIX
LOCAL_VALUES = local_cluster.DEFAULT_VALUES
MODEL = "tiny-llama"
HEAL_S = 600
Obj = dict[str, Any]
TIMINGS: list[tuple[str, str, float]] = []
# The Gateway API CRDs the chart's HTTPRoute needs: a route without them is not even sent.
GATEWAY_API_CRDS = ("httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io")


def record(scenario: str, what: str, seconds: float) -> None:
    TIMINGS.append((scenario, what, seconds))
    print(f"cluster timing: {scenario}: {what}: {seconds:.1f} s")


@dataclass
class RealCluster:
    """A running real cluster, as the tests drive it: kubectl, helm 3 and 4, its addresses."""

    info: real.ClusterInfo

    @property
    def kubeconfig(self) -> str:
        return self.info.kubeconfig

    @property
    def kserve(self) -> str:
        return self.info.kserve

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "PATH": f"{TOOLS}:{os.environ['PATH']}",
        }

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 120,
        check: bool = True,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(argv),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-3000:]}"
            )
        return result

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        return self.run([str(TOOLS / "kubectl"), *args], timeout=timeout, stdin=stdin).stdout

    def get(self, *args: str) -> Obj:
        found: Obj = json.loads(self.kubectl("get", *args, "-o", "json"))
        return found

    def items(self, *args: str) -> list[Obj]:
        return list(self.get(*args).get("items") or [])

    def download_jobs(self, namespace: str) -> dict[str, Obj]:
        """The chart's model-download Jobs in ``namespace`` by name, but any being deleted."""
        jobs = self.items("jobs", "-n", namespace,
                          "-l", "app.kubernetes.io/component=model-download")  # fmt: skip
        return {
            j["metadata"]["name"]: j for j in jobs if not j["metadata"].get("deletionTimestamp")
        }

    def helm(
        self, *args: str, version: int = 4, timeout: float = 1800, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run([str(TOOLS / f"helm{version}"), *args], timeout=timeout, check=check)

    def has_crd(self, name: str) -> bool:
        return bool(self.kubectl("get", "crd", name, "--ignore-not-found", "-o", "name").strip())

    def install_gateway_api(self) -> None:
        """The Gateway API CRDs of ``gateway_api.version()`` (standard channel), Established."""
        self.kubectl("apply", "--server-side", "-f", str(gateway_api.crd_dir()))
        self.wait_established(*GATEWAY_API_CRDS)

    def install_prometheus_operator_crds(self) -> None:
        """The Prometheus Operator's PodMonitor, ServiceMonitor and PrometheusRule CRDs of the
        pinned release, Established (the chart's monitoring values render those kinds)."""
        for path in prometheus_operator.crd_files():
            self.kubectl("apply", "--server-side", "-f", str(path))
        self.wait_established(*prometheus_operator.CRDS)

    def uninstall_prometheus_operator_crds(self) -> None:
        for path in prometheus_operator.crd_files():
            self.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=false")

    def wait_established(self, *crds: str, timeout: float = 120) -> None:
        """Until each CRD is Established. Asked, not ``kubectl wait``: a CRD just applied may have
        no conditions yet, and kubectl wait fails on that at once (CI, 4 Dec)."""
        for crd in crds:
            wait_for(
                lambda crd=crd: condition(self.get("crd", crd), "Established"),
                timeout,
                f"CRD {crd} Established",
            )

    def uninstall_gateway_api(self) -> None:
        """Delete the CRDs without waiting: the API server's finalizer removes them in the
        background, and a loaded machine took more than kubectl's two minutes to (CI, 4 Dec)."""
        self.kubectl(
            "delete", "-f", str(gateway_api.crd_dir()), "--ignore-not-found", "--wait=false"
        )

    def model_claim(self, namespace: str, claim: str, model: Path) -> Path:
        """A ReadWriteMany claim ``claim`` in ``namespace`` (made by the cluster's provisioner,
        bound by the real PV controller) holding ``model`` at ``tiny-llama/``; its folder."""
        self.kubectl("create", "namespace", namespace, "--dry-run=client", "-o", "yaml")
        with contextlib.suppress(AssertionError):
            self.kubectl("create", "namespace", namespace)
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": STORAGE_CLASS,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        self.kubectl("apply", "-f", "-", stdin=json.dumps(pvc))
        self.kubectl(
            "wait",
            "-n",
            namespace,
            f"pvc/{claim}",
            "--for=jsonpath={.status.phase}=Bound",
            "--timeout=60s",
        )
        folder = self.claim_folder(namespace, claim)
        target = folder / MODEL
        if not target.exists():
            shutil.copytree(model, target)
            make_readable(target)
        return folder

    def claim_folder(self, namespace: str, claim: str) -> Path:
        """The folder of the bound claim's volume (the provisioner's hostPath) on this machine."""
        volume = self.get("-n", namespace, f"pvc/{claim}")["spec"]["volumeName"]
        return Path(self.get(f"pv/{volume}")["spec"]["hostPath"]["path"])

    def cluster_ip(self, namespace: str, service: str) -> str:
        return str(self.get("-n", namespace, f"service/{service}")["spec"]["clusterIP"])

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        found = self.items("pods", "-n", namespace, "-l", selector)
        return [p for p in found if not p["metadata"].get("deletionTimestamp")]


# How each Helm major waits for the release to be ready. Helm 4's own default (`--wait` alone, the
# "watcher" strategy) computes each object's status with kstatus, which reads an InferenceService's
# Ready condition; 0.16.0-0.19.0 never set it True for a multi-node group (kserve-releases.yaml,
# never-ready), so the chart documents Helm 3's checks ("legacy") for Helm 4.
WAIT = {3: ("--wait",), 4: ("--wait=legacy",)}


def set_flags(sets: Sequence[str]) -> list[str]:
    """``--set KEY=VALUE`` for each of ``sets``, in order."""
    return [arg for item in sets for arg in ("--set", item)]


def chart_args(kserve: str, extra: Sequence[str] = ()) -> list[str]:
    """The README's install, for the tiny model: the local values, this cluster's KServe."""
    return ["-f", str(LOCAL_VALUES), "--set", f"kserve.version={kserve}", *extra]


def helm_chart(
    cluster: RealCluster,
    verb: str,
    release: str,
    namespace: str,
    sets: Sequence[str],
    *,
    helm: int = 4,
    timeout: str = "15m",
    check: bool = True,
    wait: Sequence[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``helm install`` or ``upgrade`` of the chart as the README runs it (the local values,
    this cluster's KServe, ``sets``), waiting with the Jobs (or as ``wait`` says)."""
    return cluster.helm(
        verb, release, str(CHART), "--namespace", namespace,
        *chart_args(cluster.kserve, set_flags(sets)),
        *(WAIT[helm] if wait is None else wait), "--wait-for-jobs", "--timeout", timeout,
        version=helm, check=check,
    )  # fmt: skip


@dataclass
class Installed:
    """One helm release of the chart on a real cluster: the group as serving_checks see it."""

    cluster: RealCluster
    release: str
    namespace: str
    isvc: str
    model: str = MODEL
    sets: list[str] = field(default_factory=list)  # the --set values every upgrade keeps

    @property
    def base_url(self) -> str:
        """The predictor Service, through its ClusterIP (routed from this machine to the
        cluster's kube-proxy, as any in-cluster client reaches it)."""
        return f"http://{self.cluster.cluster_ip(self.namespace, self.isvc + '-predictor')}:80"

    def pods(self, role: str) -> list[Obj]:
        app = f"isvc.{self.isvc}-predictor" + ("-worker" if role == "worker" else "")
        return self.cluster.pods(self.namespace, f"app={app}")

    def ready(self, role: str) -> bool:
        pods = self.pods(role)
        return bool(pods) and all(condition(p, "Ready") for p in pods)

    def manifest(self) -> list[Obj]:
        """The objects Helm applied for this release (``helm get manifest``)."""
        text = self.cluster.helm("get", "manifest", self.release, "--namespace", self.namespace)
        return [doc for doc in yaml.safe_load_all(text.stdout) if doc]

    def replica_sets(self, role: str) -> list[str]:
        """The ReplicaSets KServe's Deployment of ``role`` has had: one per roll of the group."""
        deployment = f"{self.isvc}-predictor" + ("-worker" if role == "worker" else "")
        found = self.cluster.items("replicasets", "-n", self.namespace)
        return sorted(
            rs["metadata"]["name"]
            for rs in found
            if any(o["name"] == deployment for o in rs["metadata"].get("ownerReferences") or [])
        )

    def upgrade(
        self,
        *sets: str,
        helm: int = 4,
        timeout: str = "15m",
        check: bool = True,
        wait: Sequence[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``helm upgrade`` with the values of the install and every upgrade before, plus
        ``sets`` (KEY=VALUE), waiting as the README says (or as ``wait`` says)."""
        self.sets = [*self.sets, *sets]
        return helm_chart(
            self.cluster, "upgrade", self.release, self.namespace, self.sets,
            helm=helm, timeout=timeout, check=check, wait=wait,
        )  # fmt: skip

    def pod(self, role: str) -> Obj:
        [found] = self.pods(role)
        return found

    def _folder(self, pod: Obj) -> Path:
        """The node agent's folder of the pod: its container logs, ``pod.json``."""
        meta = pod["metadata"]
        state = Path(self.cluster.kubeconfig).parent
        return state / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"

    def log(self, role: str, previous: bool = False) -> str:
        """The ``role`` pod's first container's log (its run before the last, with
        ``previous``), as the node agent wrote it (``kubectl logs`` needs a kubelet API)."""
        pod = self.pod(role)
        status = pod["status"]["containerStatuses"][0]
        run = int(status["restartCount"]) - (1 if previous else 0)
        path = self._folder(pod) / f"{status['name']}-{run}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def last_exit(self, role: str) -> Obj:
        """The ``role`` pod's first container's last termination (``lastState``), or {}."""
        status = self.pod(role)["status"]["containerStatuses"][0]
        return dict((status.get("lastState") or {}).get("terminated") or {})

    def status_json(self, role: str) -> Obj:
        """The pod's supervisor ``/status`` (its facts), on its status port."""
        url = f"http://{self.pod(role)['status']['podIP']}:{STATUS_PORT}/status"
        with urllib.request.urlopen(url, timeout=5) as answer:
            found: Obj = json.loads(answer.read())
        return found

    def processes(self, role: str) -> dict[int, str]:
        """Every process of the ``role`` pod (its network namespace): PID -> command."""
        uid = self.pod(role)["metadata"]["uid"]
        return processes_in(ClusterNetwork(prefix=PREFIX).pod_namespace(uid))

    def exec(self, role: str, argv: Sequence[str], timeout: float = 120) -> str:
        """``argv`` in the pod's first container, as its user with its env (kubectl exec)."""
        pod = self.pod(role)
        plan = PodPlan.from_json(json.loads((self._folder(pod) / "pod.json").read_text()))
        container = next(
            c for c in plan.containers if c.name == pod["spec"]["containers"][0]["name"]
        )
        init = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
        command = enter_command(init, container, list(argv))
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    def check_ray(self, tensor: int) -> None:
        """One alive Ray node per pod of the group, with its mocked GPUs (serving_checks)."""
        nodes = parse_ray_nodes(self.exec("head", ["python", "-c", RAY_NODES_SCRIPT]))
        ips = [p["status"]["podIP"] for role in ("head", "worker") for p in self.pods(role)]
        check_ray(nodes, ips, tensor)

    def kill(self, role: str) -> None:
        """SIGKILL the first ``role`` pod's first container (its init: every process of it
        dies, as when a node's processes crash; the node agent restarts it)."""
        [pod] = self.pods(role)
        container_id = pod["status"]["containerStatuses"][0]["containerID"]
        pid = int(container_id.removeprefix("local://"))
        assert pid > 0, container_id
        os.kill(pid, signal.SIGKILL)

    def serves(self) -> bool:
        """Whether one completion comes back through the predictor Service now."""
        return checks.answers(self)

    def heals_after_killing(self, role: str, timeout: float = HEAL_S) -> float:
        """Kill ``role`` and wait until it restarted and the group serves again: the seconds."""
        before = self.restarts(role)
        self.kill(role)
        return wait_for(
            lambda: self.restarts(role) > before and self.ready("head") and self.serves(),
            timeout,
            f"the group serving again after its {role} was killed",
        )

    def restarts(self, role: str) -> int:
        return sum(
            s.get("restartCount", 0)
            for p in self.pods(role)
            for s in p["status"].get("containerStatuses") or []
        )


@dataclass(frozen=True)
class Endpoint:
    """A base URL that serves ``model``, as serving_checks ask for one."""

    base_url: str
    model: str = MODEL


def condition(obj: Obj, kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Clusters:
    """One real cluster at a time for the whole session: a test module asks for a KServe release
    and gets the running cluster when it runs that release, else a new one (the old one torn down
    first, leaving no process, namespace or mount). Each module cleans up its own namespaces."""

    def __init__(self) -> None:
        self.current: RealCluster | None = None
        self._lock: contextlib.ExitStack | None = None

    def get(self, kserve_version: str) -> RealCluster:
        if self.current is not None and self.current.kserve == kserve_version:
            return self.current
        self.close()
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(file_lock(CLUSTER_LOCK, "one real cluster at a time"))
        started = time.monotonic()
        info = real.up(
            real.UpOptions(prefix=PREFIX, kserve_version=kserve_version),
            progress=lambda line: print(f"cluster: {line}", flush=True),
        )
        record(
            f"KServe {info.kserve}",
            "cluster up (control plane, nodes, KServe)",
            time.monotonic() - started,
        )
        self.current = RealCluster(info)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current = None
            real.down(PREFIX)
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def install(
    cluster: RealCluster,
    release: str,
    namespace: str,
    *sets: str,
    helm: int = 4,
    timeout: str = "15m",
) -> Installed:
    """``helm install`` as the README says (``--wait --wait-for-jobs``), timed."""
    started = time.monotonic()
    helm_chart(cluster, "install", release, namespace, sets, helm=helm, timeout=timeout)
    record(
        f"KServe {cluster.kserve}",
        f"helm{helm} install {' '.join(sets) or '(PP=2, Ray)'}",
        time.monotonic() - started,
    )
    fullname = release if "multinode-llm" in release else f"{release}-multinode-llm"
    return Installed(cluster, release, namespace, fullname, sets=list(sets))


def keeps_removed(kserve: str) -> bool:
    """Whether KServe ``kserve`` keeps what an update removes from a Deployment (0.15.0)."""
    return releases.get(kserve).has_defect("deployment-update-keeps-removed")


def remake_deployments(cluster: RealCluster, namespace: str, isvc: str) -> None:
    """The way out docs/upgrades.md gives on such a release: delete the head's and the workers'
    Deployments, and KServe makes them again from the InferenceService."""
    deployments = [f"{isvc}-predictor", f"{isvc}-predictor-worker"]
    cluster.kubectl("-n", namespace, "delete", "deployment", *deployments,
                    "--cascade=foreground", "--timeout=300s", timeout=330)  # fmt: skip


def helm_history(cluster: RealCluster, release: str, namespace: str, helm: int = 4) -> list[str]:
    """``helm history`` of the release: each revision's status, oldest first."""
    found = cluster.helm("history", release, "--namespace", namespace, "-o", "json", version=helm)
    return [str(r["status"]) for r in json.loads(found.stdout)]


def render_pending(release: str, namespace: str, kserve: str, *sets: str) -> list[Obj]:
    """The chart's runtime and InferenceService as helm renders them for ``kserve``, their pods
    pinned to a node label nobody has: for tests that read what KServe makes of them, with no
    group to run (a refused value cannot be rendered, so these objects then change by hand)."""
    extra = set_flags(sets)
    rendered = subprocess.run(
        [str(TOOLS / "helm4"), "template", release, str(CHART), "--namespace", namespace,
         "--set", "model.uri=pvc://models/tiny-llama", "--set", f"kserve.version={kserve}",
         "--set", "readiness.enabled=false",
         "--set-json", 'head.nodeSelector={"multinode-llm.local/none":"pending"}',
         "--set-json", 'worker.nodeSelector={"multinode-llm.local/none":"pending"}', *extra],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    kinds = ("ServingRuntime", "ClusterServingRuntime", "InferenceService")
    return [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") in kinds]


def events(cluster: RealCluster, namespace: str, name: str) -> list[str]:
    """``reason: message`` of every Event about the object ``name`` in ``namespace``."""
    found = cluster.items("events", "-n", namespace, "--field-selector",
                          f"involvedObject.name={name}")  # fmt: skip
    return [f"{e.get('reason', '')}: {e.get('message', '')}" for e in found]


@contextlib.contextmanager
def with_namespace(clusters: Clusters, namespace: str) -> Iterator[RealCluster]:
    """The default KServe release's cluster with ``namespace`` made for a module, and removed
    (without waiting) after it."""
    running = clusters.get(releases.default().version)
    running.kubectl("create", "namespace", namespace)
    yield running
    running.kubectl("delete", "namespace", namespace, "--wait=false")


def start_fake_hub(cluster: RealCluster, model: Path, repo: str) -> FakeHub:
    """A FAKE Hub serving ``model`` as ``repo`` on this machine's end of the cluster's uplink
    (the address pods may reach), started; its byte counts say what the pods downloaded."""
    files = {
        str(path.relative_to(model)): path.read_bytes()
        for path in sorted(model.rglob("*"))
        if path.is_file()
    }
    fake = FakeHub(host=cluster.info.root_ip)
    fake.xet = False
    fake.add(FakeRepo(repo, files))
    fake.start()
    return fake


def provide_storage_initializer(cluster: RealCluster, image: str) -> None:
    """KServe's storage-initializer ``image`` on the cluster's nodes, a FAKE image (none can be
    pulled here): the cluster's KServe release's own storage code, run as the image's entrypoint
    runs it (storage_sites.py, run_initializer.py), with the image's environment."""
    [release] = [r for r in storage_sites.releases() if r.version == cluster.kserve]
    site = storage_sites.build_sites([release])[release.version]
    stand_in = runtime.Image(
        rootfs="",
        entrypoint=tuple(site.command()),
        env={**IMAGE_ENV, **site.env()},
        paths=(str(site.code), str(site.deps), str(storage_sites.RUNNER.parent)),
    )
    runtime.provide(Path(cluster.kubeconfig).parent, image, stand_in)


@contextlib.contextmanager
def serving_lock() -> Iterator[None]:
    with vllm_lock():
        yield


def releases_to_run() -> list[str]:
    """The KServe releases an opt-in multi-release module runs on: the chart's default, or those
    ``KSERVE_RELEASES`` names (``all``: every release the chart supports whose manager is built
    here; else a comma-separated list, a refused one skipped with its reason)."""
    asked = os.environ.get("KSERVE_RELEASES", "").strip()
    if not asked:
        return [releases.default().version]
    if asked == "all":
        built = real_kserve.built_versions()
        return [v for v in built if releases.get(v).status == "supported"]
    return [v.strip() for v in asked.split(",") if v.strip()]


def supported_or_skip(version: str, why: str) -> releases.Release:
    """KServe ``version``'s entry in the chart's table; the test skips, saying ``why`` it cannot
    go on, where the chart refuses that release (test_releases.py checks the refusal itself)."""
    release = releases.get(version)
    if release.status != "supported":
        pytest.skip(f"the chart refuses KServe {version} ({release.status}): {why}")
    return release


def wait_for(condition_: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    wait_until(condition_, timeout, what, interval=1.0)
    return time.monotonic() - started
