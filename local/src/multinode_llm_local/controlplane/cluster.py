"""A real Kubernetes cluster on this machine: ``cluster up``, ``cluster down``, ``cluster status``.

``up`` builds (or finds) the programs (``build.py``), makes the network (``network.py``) and the
certificates (``pki.py``), and starts as processes in the host namespace: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kube-proxy (iptables), and the node daemon
(``daemon.py``: the node agents that stand in for kubelets with a container runtime, and the
volume provisioner). Then, with real kubectl and helm, it installs the cluster's add-ons (a
ReadWriteMany StorageClass, CoreDNS) and one KServe release (``kserve.py``), and waits until
KServe's webhooks answer. What runs in pods (CoreDNS, KServe's manager, the chart's pods) runs
in pods, scheduled by the real scheduler onto the nodes the agents registered.

The state directory (``/run/multinode-llm/<prefix>``) holds ``cluster.json`` (what ``up`` made),
``kubeconfig`` (cluster-admin, for helm and kubectl), ``pki/``, ``etcd/``, ``logs/<process>.log``,
``pids/<process>.pid``, ``pods/`` (the agents' pods) and ``volumes/`` (the provisioned volumes).
``down`` stops every process by its pid file and by network namespace, then removes the network
and the state: safe to repeat, and it cleans up after a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local.chart import find_chart, find_helm
from multinode_llm_local.controlplane import argocd, build, kserve, llmisvc, lws
from multinode_llm_local.controlplane.kubectl import Kubectl
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_local.controlplane.pki import Pki
from multinode_llm_local.netns import namespaces_with_prefix, require_root
from multinode_llm_local.state import state_root

Progress = Callable[[str], None]
DEFAULT_PREFIX = "mnk"
API_PORT = 6443
READY_S = 180.0
STOP_GRACE_S = 10.0
REQUIRED_TOOLS = ("ip", "iptables", "iptables-restore", "openssl", "nsenter", "unshare", "go")
# The processes of the control plane, in the order ``up`` starts them (``down`` stops them in
# the reverse order).
PROCESSES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "node-daemon",
)

# The modules of local/go every cluster builds, beside its KServe release's.
PROGRAM_MODULES = ("kubernetes", "etcd", "coredns", "kube-rbac-proxy", "lws")
# Modules ``cluster build`` also builds, for what runs beside a cluster on demand (``argo_cd``).
ADDON_MODULES = ("argocd",)


@dataclass(frozen=True)
class UpOptions:
    """What ``cluster up`` was asked for; every field has the CLI's default."""

    prefix: str = DEFAULT_PREFIX
    kserve_version: str = ""  # empty: the chart's default release (kserve-releases.yaml)
    nodes: int = 2
    gpus_per_node: int = 2
    cpus_per_node: int = 8
    memory_per_node: str = "32Gi"
    # Image reference prefix -> a built image (local/images.py): containers of matching images
    # run from its root filesystem instead of this machine's Python.
    images: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterInfo:
    """What ``up`` made (``cluster.json``): read by ``status``, the tests and the daemon."""

    prefix: str
    kubeconfig: str
    server: str
    kubernetes: str
    kserve: str
    kserve_source: str  # "module github.com/kserve/kserve@vX.Y.Z"
    lws: str  # the LeaderWorkerSet release built (vX.Y.Z), installed only on demand
    nodes: list[str]
    gpus_per_node: int
    cpus_per_node: int
    memory_per_node: str
    dns_ip: str
    root_ip: str
    images: dict[str, str]
    programs: dict[str, str]  # program name -> its build (the node agent's images use them)
    started: float
    # KServe's llmisvc controller at the manager's release (vX.Y.Z) where one is built there
    # (local/go/llmisvc-vX.Y.Z), else empty; installed only on demand
    llmisvc: str = ""

    @classmethod
    def load(cls, path: Path) -> ClusterInfo:
        return cls(**json.loads(path.read_text()))


class State:
    """The paths of one real cluster's state directory."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.directory = state_root() / prefix

    @property
    def info_file(self) -> Path:
        return self.directory / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def pid_file(self, name: str) -> Path:
        return self.directory / "pids" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def info(self) -> ClusterInfo | None:
        return ClusterInfo.load(self.info_file) if self.info_file.is_file() else None


def up(options: UpOptions, progress: Progress = print) -> ClusterInfo:
    """Start a real cluster with KServe and return once KServe's webhooks answer."""
    require_root()
    _require_tools()
    state = State(options.prefix)
    if state.info() is not None and _alive(state, "kube-apiserver"):
        raise UserError(
            f"a real cluster with prefix {options.prefix!r} is already up: "
            f"run `multinode-llm-local cluster down --prefix {options.prefix}` first"
        )
    release = kserve.resolve(options.kserve_version)
    started = time.monotonic()
    programs = _build_programs(release.module, llmisvc.module(release.version), progress)
    down(options.prefix)
    network = ClusterNetwork(prefix=options.prefix)
    try:
        info = _start(options, state, network, programs, release, progress)
    except BaseException:
        down(options.prefix)
        raise
    progress(
        f"cluster up in {time.monotonic() - started:.0f} s: export KUBECONFIG={info.kubeconfig}"
    )
    return info


def _start(
    options: UpOptions,
    state: State,
    network: ClusterNetwork,
    programs: dict[str, Path],
    release: kserve.Release,
    progress: Progress,
) -> ClusterInfo:
    for folder in ("pids", "logs", "pods", "volumes"):
        (state.directory / folder).mkdir(parents=True, exist_ok=True)
    state.directory.chmod(0o700)
    network.create()
    pki = Pki(state.directory / "pki")
    server = f"https://{network.bridge_ip}:{API_PORT}"
    admin = pki.kubeconfig(
        "admin", server, pki.issue("admin", "kubernetes-admin", ["system:masters"])
    )
    shutil.copy(admin, state.kubeconfig)
    nodes = [f"node-{index}" for index in range(options.nodes)]
    info = ClusterInfo(
        prefix=options.prefix,
        kubeconfig=str(state.kubeconfig),
        server=server,
        kubernetes=build.modules()["kubernetes"].required("k8s.io/kubernetes"),
        kserve=release.version,
        kserve_source=release.source,
        lws=lws.version(),
        nodes=nodes,
        gpus_per_node=options.gpus_per_node,
        cpus_per_node=options.cpus_per_node,
        memory_per_node=options.memory_per_node,
        dns_ip=network.dns_ip,
        root_ip=network.root_ip,
        images=dict(options.images),
        programs={name: str(path) for name, path in programs.items()},
        started=time.time(),
        llmisvc=f"v{release.version}" if "llmisvc" in programs else "",
    )
    state.info_file.write_text(json.dumps(asdict(info), indent=1))
    progress(f"starting etcd and kube-apiserver {info.kubernetes} on {server}")
    _spawn(state, network, "etcd", _etcd_args(programs["etcd"], state))
    _spawn(state, network, "kube-apiserver", _apiserver_args(programs, state, network, pki))
    _wait_api(server, pki, READY_S)
    progress("starting kube-controller-manager, kube-scheduler and kube-proxy")
    kcm = pki.issue("kube-controller-manager", "system:kube-controller-manager")
    scheduler = pki.issue("kube-scheduler", "system:kube-scheduler")
    proxy = pki.issue("kube-proxy", "system:kube-proxy")
    _spawn(
        state,
        network,
        "kube-controller-manager",
        _kcm_args(programs, pki, network, pki.kubeconfig("kube-controller-manager", server, kcm)),
    )
    _spawn(
        state,
        network,
        "kube-scheduler",
        _scheduler_args(programs, pki.kubeconfig("kube-scheduler", server, scheduler)),
    )
    _spawn(
        state,
        network,
        "kube-proxy",
        _proxy_args(programs, network, pki.kubeconfig("kube-proxy", server, proxy)),
    )
    for node in nodes:
        pki.kubeconfig(node, server, pki.issue(node, f"system:node:{node}", ["system:nodes"]))
    progress(f"starting the node agents of {', '.join(nodes)} (fake kubelets) and the provisioner")
    # The daemon stays in this machine's namespace: the pods' namespaces it makes must be seen
    # (and entered) from here, and a process of `ip netns exec` lives in a mount namespace of its
    # own whose mounts, /run/netns/* among them, would never reach this one.
    _spawn(
        state,
        None,
        "node-daemon",
        [sys.executable, "-m", "multinode_llm_local.controlplane.daemon", str(state.directory)],
    )
    kubectl = Kubectl(state.kubeconfig)
    _wait_nodes(kubectl, nodes, READY_S)
    progress("installing the add-ons: the ReadWriteMany StorageClass and CoreDNS")
    from multinode_llm_local.controlplane import addons

    kubectl.apply(addons.manifests(network))
    kubectl.rollout("kube-system", "deployment/coredns", READY_S)
    progress(f"installing KServe {release.version} ({release.source})")
    kserve.install(kubectl, release, pki, find_helm(find_chart()), progress)
    return info


def _running(prefix: str) -> tuple[State, ClusterInfo]:
    """The state and record of the cluster with ``prefix``, which must be up."""
    state = State(prefix)
    info = state.info()
    if info is None or not _alive(state, "kube-apiserver"):
        raise UserError(
            f"no real cluster with prefix {prefix!r} is up: run `multinode-llm-local cluster up`"
        )
    return state, info


def leader_worker_set(prefix: str = DEFAULT_PREFIX, remove: bool = False) -> str:
    """Install LeaderWorkerSet's controller on the running cluster (or ``remove`` it)."""
    state, info = _running(prefix)
    kubectl = Kubectl(state.kubeconfig)
    helm = find_helm(find_chart())
    if remove:
        lws.uninstall(kubectl, helm)
        return f"LeaderWorkerSet {info.lws} removed"
    lws.install(kubectl, Pki(state.directory / "pki"), helm)
    return f"LeaderWorkerSet {info.lws} serves its webhooks (module {lws.MODULE}@{info.lws})"


def llm_inference_service(prefix: str = DEFAULT_PREFIX, remove: bool = False) -> str:
    """Install KServe's llmisvc controller on the running cluster (or ``remove`` it)."""
    state, info = _running(prefix)
    kubectl = Kubectl(state.kubeconfig)
    helm = find_helm(find_chart())
    if remove:
        llmisvc.uninstall(kubectl, info.kserve, helm)
        return f"KServe's llmisvc controller v{info.kserve} removed"
    # Checked first: the controller looks for the kind once, when it starts (llmisvc.py).
    if not kubectl.run("get", "crd", "--ignore-not-found", "-o", "name", lws.CRDS[0]).strip():
        raise UserError(
            "LeaderWorkerSet is not installed: KServe's llmisvc controller runs a multi-node "
            "service as a LeaderWorkerSet and watches that kind only if it exists when it "
            "starts; run `multinode-llm-local cluster lws` first"
        )
    llmisvc.install(kubectl, info.kserve, Pki(state.directory / "pki"), helm)
    return f"KServe's llmisvc controller v{info.kserve} serves (module {llmisvc.SOURCE})"


def argo_cd(prefix: str = DEFAULT_PREFIX) -> str:
    """Start Argo CD's application controller and repo server on the running cluster, with the
    chart's InferenceService health check in argocd-cm (``argocd.py``)."""
    state, _ = _running(prefix)
    if _alive(state, "argocd-application-controller"):
        return f"Argo CD {argocd.version()} already runs"
    network = ClusterNetwork(prefix=prefix)
    chart = find_chart()
    lua = (chart / "files" / "argocd-health-inferenceservice.lua").read_text()

    def spawn(name: str, argv: list[str], env: dict[str, str]) -> int:
        return _spawn(state, network, name, argv, env)

    argocd.install(
        Kubectl(state.kubeconfig),
        spawn,
        find_helm(chart),
        state.directory,
        {argocd.HEALTH_KEY: lua},
    )
    where = f"module {argocd.MODULE}; Applications in namespace {argocd.NAMESPACE}"
    return f"Argo CD {argocd.version()} runs ({where})"


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Stop everything a real cluster with ``prefix`` started and remove its state."""
    require_root()
    state = State(prefix)
    removed: list[str] = []
    for name in reversed((*PROCESSES, *argocd.PROCESSES)):
        if _stop(state, name):
            removed.append(name)
    network = ClusterNetwork(prefix=prefix)
    for namespace in namespaces_with_prefix(prefix):
        _kill_netns(namespace)
    _unmount_below(state.directory)
    if namespaces_with_prefix(prefix):
        removed.append("network namespaces")
    network.destroy()
    if state.directory.exists():
        shutil.rmtree(state.directory, ignore_errors=True)
        removed.append(str(state.directory))
    return removed


def status(prefix: str = DEFAULT_PREFIX) -> dict[str, Any] | None:
    """The cluster's info and which of its processes run, or None when none is up."""
    state = State(prefix)
    info = state.info()
    if info is None:
        return None
    return {**asdict(info), "processes": {name: _alive(state, name) for name in PROCESSES}}


def _build_programs(
    kserve_module: build.Module, llmisvc_module: build.Module | None, progress: Progress
) -> dict[str, Path]:
    """Every program the cluster may run, built (or found built): the manager's release decides
    KServe's, and its llmisvc controller's where that release has one."""
    modules = build.modules()
    folders = {name: build.build(modules[name], progress) for name in PROGRAM_MODULES}
    folders["kserve"] = build.build(kserve_module, progress)
    programs = {
        "etcd": folders["etcd"] / "etcd",
        "coredns": folders["coredns"] / "coredns",
        "kube-rbac-proxy": folders["kube-rbac-proxy"] / "kube-rbac-proxy",
        "manager": folders["kserve"] / "manager",
        "lws": folders["lws"] / "cmd",  # sigs.k8s.io/lws/cmd, installed on demand (lws.py)
    }
    if llmisvc_module is not None:  # installed on demand (llmisvc.py)
        programs["llmisvc"] = build.build(llmisvc_module, progress) / "llmisvc"
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"):
        programs[name] = folders["kubernetes"] / name
    return programs


def _etcd_args(etcd: Path, state: State) -> list[str]:
    local = "http://127.0.0.1"
    return [
        str(etcd),
        "--name=local",
        f"--data-dir={state.directory / 'etcd'}",
        f"--listen-client-urls={local}:2379",
        f"--advertise-client-urls={local}:2379",
        f"--listen-peer-urls={local}:2380",
        f"--initial-advertise-peer-urls={local}:2380",
        f"--initial-cluster=local={local}:2380",
        f"--listen-metrics-urls={local}:2381",
        # A test cluster's data is thrown away with it: no fsync per write (etcd's own tests and
        # kind's in-memory etcd do the same), which keeps a 2-core machine's disk out of the way.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def _apiserver_args(
    programs: dict[str, Path], state: State, network: ClusterNetwork, pki: Pki
) -> list[str]:
    serving = pki.issue(
        "kube-apiserver",
        "kube-apiserver",
        ips=[network.bridge_ip, network.kubernetes_service_ip, network.uplink_ip, "127.0.0.1"],
        dns=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
    )
    kubelet_client = pki.issue(
        "kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["kubeadm:cluster-admins"]
    )
    accounts = pki.service_account_keys()
    return [
        str(programs["kube-apiserver"]),
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=0.0.0.0",
        f"--secure-port={API_PORT}",
        f"--advertise-address={network.bridge_ip}",
        f"--service-cluster-ip-range={network.services}",
        f"--client-ca-file={pki.ca.cert}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        f"--kubelet-client-certificate={kubelet_client.cert}",
        f"--kubelet-client-key={kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={accounts.cert}",
        f"--service-account-signing-key-file={accounts.key}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        "--event-ttl=1h",
        "--v=1",
    ]


def _kcm_args(
    programs: dict[str, Path], pki: Pki, network: ClusterNetwork, kubeconfig: Path
) -> list[str]:
    accounts = pki.service_account_keys()
    return [
        str(programs["kube-controller-manager"]),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        "--controllers=*",
        f"--root-ca-file={pki.ca.cert}",
        f"--service-account-private-key-file={accounts.key}",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={network.pods}",
        "--node-cidr-mask-size=24",
        f"--service-cluster-ip-range={network.services}",
        "--profiling=false",
        "--v=1",
    ]


def _scheduler_args(programs: dict[str, Path], kubeconfig: Path) -> list[str]:
    return [
        str(programs["kube-scheduler"]),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def _proxy_args(programs: dict[str, Path], network: ClusterNetwork, kubeconfig: Path) -> list[str]:
    # One kube-proxy programs the one host namespace every node shares; it names itself after
    # the first node (only internalTrafficPolicy/externalTrafficPolicy Local read that name).
    return [
        str(programs["kube-proxy"]),
        f"--kubeconfig={kubeconfig}",
        "--proxy-mode=iptables",
        f"--cluster-cidr={network.pods}",
        "--hostname-override=node-0",
        "--conntrack-max-per-core=0",  # leave the machine's conntrack table size alone
        "--metrics-bind-address=127.0.0.1:10249",
        "--healthz-bind-address=127.0.0.1:10256",
        "--v=1",
    ]


def _spawn(
    state: State,
    network: ClusterNetwork | None,
    name: str,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
) -> int:
    """Start ``argv`` in the host namespace (in this one without ``network``), in a session of
    its own, logging to its file; ``env`` replaces the environment."""
    log = state.log_file(name)
    with log.open("ab") as output:
        process = subprocess.Popen(
            network.in_host(argv) if network else list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    state.pid_file(name).write_text(str(process.pid))
    time.sleep(0.2)
    if process.poll() is not None:
        raise UserError(f"{name} exited at once ({process.returncode}): see {log}")
    return process.pid


def _wait_api(server: str, pki: Pki, timeout: float) -> None:
    """Until the API server's /readyz says ok (it checks etcd, its own start-up hooks)."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    admin = pki.issue("admin", "kubernetes-admin", ["system:masters"])
    context.load_cert_chain(admin.cert, admin.key)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            # https, to the address up just chose: no user-supplied scheme reaches urlopen.
            url = f"{server}/readyz"
            with urllib.request.urlopen(url, context=context, timeout=5) as answer:  # noqa: S310
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(0.5)
    raise UserError(f"kube-apiserver did not become ready within {timeout:.0f} s ({last})")


def _wait_nodes(kubectl: Kubectl, names: Sequence[str], timeout: float) -> None:
    """Until every node is registered and Ready with a podCIDR (the node-IPAM controller's)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = json.loads(kubectl.run("get", "nodes", "-o", "json"))["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            if n["spec"].get("podCIDR")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions") or []
            )
        }
        if set(names) <= ready:
            return
        if time.monotonic() > deadline:
            raise UserError(
                f"nodes {sorted(set(names) - ready)} were not Ready within {timeout:.0f} s: "
                "see the node daemon's log (logs/node-daemon.log in the state directory)"
            )
        time.sleep(0.5)


def _alive(state: State, name: str) -> bool:
    pid = _pid(state, name)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid(state: State, name: str) -> int | None:
    path = state.pid_file(name)
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text())
    return None


def _stop(state: State, name: str) -> bool:
    """SIGTERM the process and its session, SIGKILL after a grace; True if it was running."""
    pid = _pid(state, name)
    if pid is None or not _alive(state, name):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and _alive(state, name):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


def _kill_netns(namespace: str) -> None:
    """SIGKILL whatever still runs in a namespace (a container the daemon did not stop)."""
    result = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    for pid in result.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _unmount_below(directory: Path) -> None:
    """Unmount what a crashed container left mounted below the state directory, deepest first."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    targets = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for target in sorted(targets, key=len, reverse=True):
        if target.startswith(f"{directory}/"):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def _require_tools() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise UserError(
            f"the real cluster needs {', '.join(missing)}: apt-get install iproute2 iptables "
            "openssl util-linux (go: Go 1.26, from go.dev or your distribution)"
        )
