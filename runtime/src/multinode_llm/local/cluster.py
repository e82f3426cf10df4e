"""The local cluster's lifecycle: ``up``, ``down``, ``status`` and ``exec``.

``up`` does everything that can fail with a clear message before anything runs: it renders the
chart with real helm, lets the KServe emulation (``kserve.py``) turn the ServingRuntime and the
InferenceService into Deployments and Services, schedules the pods on one node with a mocked GPU
capacity, gives each running pod a network namespace with its Services in ``/etc/hosts``, plans
its containers (``pods.py``) and starts the kubelet daemon (``kubelet.py``). Then it waits for the
head to be Ready. ``down`` undoes all of it, by prefix, even after a crash.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from multinode_llm.errors import UserError
from multinode_llm.local import kserve
from multinode_llm.local.k8s import Obj
from multinode_llm.local.kubelet import enter_command
from multinode_llm.local.netns import Network, namespaces_with_prefix, require_root
from multinode_llm.local.pods import PodIdentity, PodPlan, plan_pod
from multinode_llm.local.state import ClusterPlan, ClusterState, Forward, process_alive

DEFAULT_PREFIX = "mnl"
DEFAULT_SUBNET = "10.230.0.0/24"
DEFAULT_RELEASE = "local"
DEFAULT_NAMESPACE = "default"
DEFAULT_PORT = 8000
KUBE_VERSION = "1.31.0"
# The local cluster stands in for a cluster with KServe installed.
API_VERSIONS = ("serving.kserve.io/v1alpha1", "serving.kserve.io/v1beta1")
DEFAULT_VALUES = Path(__file__).with_name("values-local.yaml")
REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "setpriv", "mount")
_POD_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for generated names


@dataclass(frozen=True)
class UpOptions:
    """What ``local up`` was asked for; every field has the CLI's default."""

    values: Sequence[Path] = ()
    sets: Sequence[str] = ()
    volumes: Mapping[str, Path] = field(default_factory=dict)
    prefix: str = DEFAULT_PREFIX
    subnet: str = DEFAULT_SUBNET
    release: str = DEFAULT_RELEASE
    namespace: str = DEFAULT_NAMESPACE
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port
    node_gpus: int = 0  # the node's mocked GPU capacity; 0: as many as the pods request
    chart: Path | None = None
    helm: Path | None = None
    wait_s: float | None = None  # None: the head's startup budget plus a margin


def up(options: UpOptions, progress: Callable[[str], None] = lambda line: None) -> ClusterPlan:
    """Start a cluster and return its plan once the head pod is Ready."""
    plan = start(options, progress)
    state = ClusterState(options.prefix)
    wait_ready(state, plan, options.wait_s or startup_budget(plan), progress)
    return plan


def start(options: UpOptions, progress: Callable[[str], None] = lambda line: None) -> ClusterPlan:
    """Everything ``up`` does short of waiting: render, reconcile, network, kubelet."""
    require_root()
    _require_tools()
    state = ClusterState(options.prefix)
    if state.kubelet_pid() is not None:
        raise UserError(
            f"a local cluster with prefix {options.prefix!r} is already up "
            f"(kubelet pid {state.kubelet_pid()}): run `multinode-llm local down` first"
        )
    subnet = _subnet(options.subnet)
    listener = _listen(options.host, options.port)
    try:
        chart = options.chart or find_chart()
        values = list(options.values) or [DEFAULT_VALUES]
        objects = render(
            chart, values, options.sets, options.release, options.namespace, options.helm
        )
        reconciled = kserve.reconcile(objects, options.namespace)
        claims = dict(options.volumes)
        _default_claims(reconciled.storage_uri, claims, make=not options.values, progress=progress)
    except BaseException:
        listener.close()
        raise
    down(options.prefix)  # whatever a crashed run with this prefix left behind
    network = Network(options.prefix, subnet)
    network.create()
    try:
        plan = _plan(options, state, network, reconciled, objects, claims, listener)
        state.write_plan(plan)
        _start_kubelet(state, listener)
    except BaseException:
        listener.close()
        down(options.prefix)
        raise
    listener.close()
    progress(f"kubelet started; pods: {', '.join(p.name for p in plan.pods)}")
    return plan


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove everything a cluster with ``prefix`` made; safe to repeat. Returns what it removed."""
    require_root()
    state = ClusterState(prefix)
    removed: list[str] = []
    pid = state.kubelet_pid()
    if pid is not None:
        plan = state.load_plan()
        grace = max((p.grace for p in plan.pods), default=30.0) if plan else 30.0
        _terminate(pid, grace + 10)
        removed.append(f"kubelet (pid {pid})")
    namespaces = namespaces_with_prefix(prefix)
    for namespace in namespaces:  # every process in our namespaces is one of our pods'
        _kill_all(_pids_in(namespace))
    Network(prefix, _subnet(DEFAULT_SUBNET)).destroy()
    removed += [f"network namespace {n}" for n in namespaces]
    if state.directory.exists():
        shutil.rmtree(state.directory, ignore_errors=True)
        removed.append(f"state {state.directory}")
    return removed


def status(prefix: str = DEFAULT_PREFIX) -> Obj | None:
    """The kubelet's status (pods, containers, events), or None when no cluster is up."""
    state = ClusterState(prefix)
    if state.load_plan() is None:
        return None
    data = state.load_status()
    data["kubelet_alive"] = state.kubelet_pid() is not None
    return data


def exec_in_pod(
    prefix: str, pod: str, argv: Sequence[str], container: str | None = None
) -> list[str]:
    """The command line that runs ``argv`` in a running container of ``pod`` (``kubectl exec``)."""
    state = ClusterState(prefix)
    plan = state.load_plan()
    current = state.load_status()
    if plan is None:
        raise UserError(
            f"no local cluster with prefix {prefix!r} is up: run `multinode-llm local up`"
        )
    pod_plan = next((p for p in plan.pods if p.name == pod or p.role == pod), None)
    if pod_plan is None:
        names = ", ".join(p.name for p in plan.pods)
        raise UserError(
            f"pod {pod!r} is not in the local cluster: choose one of {names} (or head/worker)"
        )
    pod_status = next(p for p in current.get("pods", []) if p["name"] == pod_plan.name)
    chosen = container or pod_plan.containers[0].name
    container_plan = next(c for c in pod_plan.containers if c.name == chosen)
    running = next(c for c in pod_status["containers"] if c["name"] == chosen)
    if not running.get("init_pid"):
        raise UserError(
            f"container {chosen} of pod {pod_plan.name} is not running: "
            "see `multinode-llm local status`"
        )
    return enter_command(int(running["init_pid"]), container_plan, list(argv))


def render(
    chart: Path,
    values: Sequence[Path],
    sets: Sequence[str],
    release: str,
    namespace: str,
    helm: Path | None = None,
) -> list[Obj]:
    """``helm template`` the chart; its refusals become one-line errors."""
    for path in values:
        if not path.is_file():
            raise UserError(f"values file {path} does not exist: pass an existing file to -f")
    binary = str(helm or find_helm(chart))
    argv = [
        binary,
        "template",
        release,
        str(chart),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
    ]
    for api_version in API_VERSIONS:
        argv += ["--api-versions", api_version]
    for path in values:
        argv += ["--values", str(path)]
    for assignment in sets:
        argv += ["--set", assignment]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        message = " ".join(line.strip() for line in result.stderr.splitlines() if line.strip())
        raise UserError(f"helm refused the values: {message}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if isinstance(doc, dict)]


def find_chart() -> Path:
    """``charts/multinode-llm`` of the checkout this package runs from, or of the current one."""
    candidates = [os.environ.get("MULTINODE_LLM_CHART", "")]
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        candidates += [
            str(parent / "charts" / "multinode-llm") for parent in [start, *start.parents]
        ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "Chart.yaml").is_file():
            return Path(candidate)
    raise UserError(
        "the chart charts/multinode-llm was not found: run from a checkout of multinode-llm, "
        "or pass --chart DIR (or set MULTINODE_LLM_CHART)"
    )


def find_helm(chart: Path) -> Path:
    """helm from ``$HELM``, the checkout's ``.tools/bin`` (hack/install-tools.sh) or the PATH."""
    tools = chart.resolve().parent.parent / ".tools" / "bin"
    candidates = [os.environ.get("HELM", ""), str(tools / "helm"), shutil.which("helm") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise UserError(
        "helm was not found: run `bash hack/install-tools.sh` (it puts helm in .tools/bin), "
        "or pass --helm PATH"
    )


def startup_budget(plan: ClusterPlan) -> float:
    """How long kubelet lets the head start before it restarts it, plus a minute for readiness."""
    head = next(p for p in plan.pods if p.role == "head").containers[0]
    probe = head.startup or head.readiness
    if probe is None:
        return 600.0
    return probe.initial_delay + probe.period * probe.failure_threshold + 60.0


def wait_ready(
    state: ClusterState, plan: ClusterPlan, timeout_s: float, progress: Callable[[str], None]
) -> None:
    """Wait until the head pod is Ready, reporting each pod's changes; fail with the reason."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        current = state.load_status()
        for pod in current.get("pods", []):
            line = describe_pod(pod)
            if seen.get(pod["name"]) != line:
                seen[pod["name"]] = line
                progress(line)
            if pod["role"] == "head" and pod["ready"]:
                return
        if state.kubelet_pid() is None:
            raise UserError(f"the local kubelet stopped: see {state.log_file}")
        time.sleep(0.5)
    head = next(p for p in plan.pods if p.role == "head")
    raise UserError(
        f"the head pod {head.name} was not Ready after {timeout_s:.0f}s: see its log in "
        f"{head.directory} and `multinode-llm local status`; "
        "`multinode-llm local down` removes the cluster"
    )


def describe_pod(pod: Obj) -> str:
    """One line about a pod: name, role, IP, phase/ready, restarts, container state."""
    if pod.get("pending"):
        return f"{pod['name']} ({pod['role']}): Pending: {pod['pending']}"
    states = ", ".join(
        f"{c['name']} {c['state']}{' ' + c['reason'] if c.get('reason') else ''}"
        for c in pod["containers"]
    )
    ready = "Ready" if pod["ready"] else "NotReady"
    return (
        f"{pod['name']} ({pod['role']}, {pod['ip']}): {ready}, restarts {pod['restarts']}, {states}"
    )


def _plan(
    options: UpOptions,
    state: ClusterState,
    network: Network,
    reconciled: kserve.Reconciled,
    objects: list[Obj],
    claims: Mapping[str, Path],
    listener: socket.socket,
) -> ClusterPlan:
    """Schedule the pods, give the running ones a namespace and address, plan their containers."""
    scheduled = _schedule(reconciled, options.node_gpus)
    addresses: dict[str, str] = {}
    for index, (workload, name, pending) in enumerate(scheduled):
        if not pending:
            role = "head" if workload.role == "head" else f"w{index}"
            addresses[name] = network.add_host(role).ip
    services = _service_names(reconciled, scheduled, addresses)
    pods: list[PodPlan] = []
    for index, (workload, name, pending) in enumerate(scheduled):
        role = "head" if workload.role == "head" else f"w{index}"
        identity = PodIdentity(
            name=name,
            namespace=reconciled.namespace,
            ip=addresses.get(name, ""),
            netns=f"{options.prefix}-{role}" if not pending else "",
            role=workload.role,
            labels=workload.labels,
            annotations=workload.annotations,
            directory=state.pod_dir(name),
            gpus=reconciled.head_gpus if workload.role == "head" else reconciled.worker_gpus,
            host_ip=network.gateway,
        )
        pod = plan_pod(identity, workload.pod_spec, objects, claims)
        if pending:
            pod = PodPlan(**{**pod.__dict__, "pending": pending})
        else:
            network.set_hosts(network.hosts[role], {**services, name: identity.ip})
        pods.append(pod)
    head = reconciled.head
    target = int((head.container.get("ports") or [{"containerPort": 8080}])[0]["containerPort"])
    host, port = listener.getsockname()[:2]
    forward = Forward(host=host, port=port, service=head.name, role="head", target_port=target)
    return ClusterPlan(
        prefix=options.prefix,
        subnet=str(network.subnet),
        release=options.release,
        namespace=reconciled.namespace,
        isvc=reconciled.isvc_name,
        pods=pods,
        forward=forward,
        services=services,
    )


def _schedule(
    reconciled: kserve.Reconciled, node_gpus: int
) -> list[tuple[kserve.Workload, str, str]]:
    """(workload, pod name, why it is Pending or "") for every replica, head first.

    One node with ``node_gpus`` mocked GPUs (0: unlimited): a pod whose GPU request does not fit
    in what is left stays Pending with the scheduler's message, as on a cluster short of GPUs.
    """
    left = node_gpus if node_gpus > 0 else None
    result: list[tuple[kserve.Workload, str, str]] = []
    for workload, gpus in (
        (reconciled.head, reconciled.head_gpus),
        (reconciled.worker, reconciled.worker_gpus),
    ):
        template_hash = hashlib.sha256(repr(workload.pod_spec).encode()).hexdigest()[:10]
        for _ in range(workload.replicas):
            suffix = "".join(secrets.choice(_POD_SUFFIX) for _ in range(5))
            name = f"{workload.name}-{template_hash}-{suffix}"
            pending = ""
            if left is not None:
                if gpus > left:
                    resource = next(iter(kserve.GPU_RESOURCE_TYPES))
                    pending = f"0/1 nodes are available: 1 Insufficient {resource}."
                else:
                    left -= gpus
            result.append((workload, name, pending))
    return result


def _service_names(
    reconciled: kserve.Reconciled,
    scheduled: list[tuple[kserve.Workload, str, str]],
    addresses: Mapping[str, str],
) -> dict[str, list[str]]:
    """The DNS names of the headless Services (every form a pod may use) -> their pods' IPs."""
    names: dict[str, list[str]] = {}
    for service in reconciled.services:
        if not service.headless:
            continue
        ips = [
            addresses[name]
            for workload, name, pending in scheduled
            if not pending and all(workload.labels.get(k) == v for k, v in service.selector.items())
        ]
        short = f"{service.name}.{reconciled.namespace}"
        for form in (service.name, short, f"{short}.svc", f"{short}.svc.cluster.local"):
            names[form] = ips
    return names


def _default_claims(
    storage_uri: str, claims: dict[str, Path], make: bool, progress: Callable[[str], None]
) -> None:
    """Give the model's claim a local directory; with the built-in values, make the tiny model."""
    claim, _, sub_path = storage_uri.removeprefix("pvc://").partition("/")
    if claim not in claims:
        claims[claim] = volumes_root() / claim
    model_dir = claims[claim] / sub_path
    if make and not (model_dir / "config.json").is_file():
        progress(f"making the tiny model in {model_dir} (claim {claim!r})")
        make_model(model_dir)


def make_model(directory: Path) -> None:
    """The runtime's tiny-model maker (``local/model.py``), imported only when a model is made.

    The files are then made readable by everyone: the pods run as the chart's non-root user, and
    safetensors writes its file for its owner only.
    """
    importlib.import_module("multinode_llm.local.model").make_model(directory)
    for path in [directory, *directory.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))


def volumes_root() -> Path:
    """Where the local stand-ins for PersistentVolumeClaims live; kept across up/down like a PV."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(os.environ.get("MULTINODE_LLM_LOCAL_VOLUMES", cache / "multinode-llm" / "volumes"))


def _listen(host: str, port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise UserError(
            f"port {port} on {host} is taken ({error.strerror}): "
            "pass --port with a free port (0 picks one)"
        ) from None
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


def _start_kubelet(state: ClusterState, listener: socket.socket) -> None:
    state.directory.mkdir(parents=True, exist_ok=True)
    fd = listener.fileno()
    argv = [
        sys.executable,
        "-m",
        "multinode_llm.local.kubelet",
        str(state.directory),
        "--forward-fd",
        str(fd),
    ]
    with state.log_file.open("ab") as log:
        daemon = subprocess.Popen(
            argv,
            pass_fds=(fd,),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
        )
    deadline = time.monotonic() + 10
    while state.kubelet_pid() != daemon.pid:
        if daemon.poll() is not None:
            raise UserError(
                f"the local kubelet exited at start (code {daemon.returncode}): "
                f"see {state.log_file}"
            )
        if time.monotonic() > deadline:
            raise UserError(f"the local kubelet did not start within 10s: see {state.log_file}")
        time.sleep(0.05)


def _terminate(pid: int, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _pids_in(namespace: str) -> list[int]:
    result = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _subnet(text: str) -> ipaddress.IPv4Network:
    try:
        subnet = ipaddress.ip_network(text)
    except ValueError:
        raise UserError(
            f"--subnet {text!r} is not a network: pass one such as {DEFAULT_SUBNET}"
        ) from None
    if not isinstance(subnet, ipaddress.IPv4Network):
        raise UserError(f"--subnet {text!r} is not IPv4: pass one such as {DEFAULT_SUBNET}")
    return subnet


def _require_tools() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise UserError(
            f"the local cluster needs {', '.join(missing)}: install iproute2 and util-linux "
            "(apt-get install iproute2 util-linux)"
        )
