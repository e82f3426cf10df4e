"""The local cluster's lifecycle: ``up``, ``down``, ``status`` and ``exec``.

``up`` does everything that can fail with a clear message before anything runs: it renders the
chart with real helm (one or more releases), admits the objects through the KServe release's
webhooks and lets its controller turn each InferenceService into Deployments and Services
(``kserve/``: the release comes from ``--kserve-version`` or the rendered runtime's
``multinode-llm/kserve-release`` annotation), schedules the pods on one node with a mocked GPU
capacity, gives each running pod a network namespace with its Services in ``/etc/hosts``, plans
its containers (``pods.py``) and starts the kubelet daemon (``kubelet.py``). Then it waits for the
first release's head to be Ready. ``down`` undoes all of it, by prefix, even after a crash.
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

from multinode_llm_local import images, kserve
from multinode_llm_local.chart import find_chart, find_helm
from multinode_llm_local.k8s import Obj, deployment_status
from multinode_llm_local.kubelet import enter_command
from multinode_llm_local.netns import Network, namespaces_with_prefix, require_root
from multinode_llm_local.pods import PodIdentity, PodPlan, make_readable, plan_pod
from multinode_llm_local.state import ClusterPlan, ClusterState, Forward, process_alive

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
    kserve_version: str = ""  # the KServe release to be; empty: the one the chart rendered for
    also: Sequence[str] = ()  # more releases of the chart, with the same values, beside the first
    # Image repository as rendered -> a local buildah image: those containers run from the image's
    # root filesystem (local/images.py) instead of this machine's Python. Empty: none does.
    images: Mapping[str, str] = field(default_factory=dict)


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
            f"(kubelet pid {state.kubelet_pid()}): run `multinode-llm-local down` first"
        )
    subnet = _subnet(options.subnet)
    listener = _listen(options.host, options.port)
    try:
        release, rendered, reconciled = _install(options)
        claims = dict(options.volumes)
        for each in reconciled:
            _default_claims(each.storage_uri, claims, make=not options.values, progress=progress)
    except BaseException:
        listener.close()
        raise
    down(options.prefix)  # whatever a crashed run with this prefix left behind
    network = Network(options.prefix, subnet)
    network.create()
    try:
        objects = [obj for objs in rendered.values() for obj in objs]
        plan = _plan(options, state, network, release, reconciled, objects, claims, listener)
        if options.images:
            plan = images.attach(plan, options.images)
        state.write_plan(plan)
        _start_kubelet(state, listener)
    except BaseException:
        listener.close()
        down(options.prefix)
        raise
    listener.close()
    progress(f"kubelet started; pods: {', '.join(p.name for p in plan.pods)}")
    return plan


def _install(
    options: UpOptions,
) -> tuple[kserve.Release, dict[str, list[Obj]], list[kserve.Reconciled]]:
    """Render every release, admit its objects and reconcile: what the API server and KServe do.

    The first release's InferenceService comes first in the result.
    """
    chart = options.chart or find_chart()
    values = list(options.values) or [DEFAULT_VALUES]
    sets = list(options.sets)
    if options.kserve_version:
        sets.append(f"kserve.version={options.kserve_version}")
    rendered = {
        name: render(chart, values, sets, name, options.namespace, options.helm)
        for name in dict.fromkeys([options.release, *options.also])
    }
    release = _kserve_release(rendered[options.release], options.kserve_version)
    control = kserve.Cluster(release)
    try:
        for name, objects in rendered.items():
            control.apply(objects, name, options.namespace)
        reconciled = control.reconcile()
    except (kserve.Denied, kserve.ReconcileError) as error:
        raise UserError(f"KServe {release.version}: {error}") from None
    if not reconciled:
        raise UserError(
            "the rendered chart holds no InferenceService: set model.uri (a release that only "
            "runs the model cache has no group to run here)"
        )
    return release, rendered, reconciled


def _kserve_release(objects: list[Obj], asked: str) -> kserve.Release:
    """The release ``--kserve-version`` names, else the one the chart rendered for."""
    if asked:
        return kserve.releases.resolve(asked)
    for obj in objects:
        if obj.get("kind") in kserve.RUNTIME_KINDS:
            version = (obj["metadata"].get("annotations") or {}).get(kserve.RELEASE_ANNOTATION)
            if version:
                return kserve.releases.get(version)
    return kserve.releases.default()


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
    planned = state.load_plan() if state.directory.exists() else None
    working = images.working_containers(planned) if planned else []
    images.remove(working)  # after the processes: their mounts hold the image roots
    removed += [f"working container {name}" for name in working]
    if state.directory.exists():
        shutil.rmtree(state.directory, ignore_errors=True)
        removed.append(f"state {state.directory}")
    return removed


def status(prefix: str = DEFAULT_PREFIX) -> Obj | None:
    """The kubelet's status (pods, containers, events) and each InferenceService's conditions as
    the cluster's KServe release reports them; None when no cluster is up."""
    state = ClusterState(prefix)
    plan = state.load_plan()
    if plan is None:
        return None
    data = state.load_status()
    data["kubelet_alive"] = state.kubelet_pid() is not None
    data["kserve"] = plan.kserve
    data["inferenceservices"] = isvc_conditions(plan, data.get("pods", []), time.time())
    return data


def isvc_conditions(plan: ClusterPlan, pods: list[Obj], now: float) -> list[Obj]:
    """Each InferenceService's conditions from its pods: the Deployment controller's conditions
    (k8s.deployment_status, with KServe's progress deadline), then KServe's status code."""
    release = kserve.releases.get(plan.kserve) if plan.kserve else kserve.releases.default()
    labels = {pod.name: pod.labels for pod in plan.pods}
    result = []
    for group in plan.groups:
        statuses: dict[str, Obj | None] = {}
        for deployment in group["deployments"]:
            mine = [p for p in pods if labels.get(p["name"], {}).get("app") == deployment["app"]]
            ready = sum(1 for p in mine if p.get("ready"))
            replicas = int(deployment["replicas"])
            statuses[deployment["role"]] = (
                {}  # deleted after every reconcile: recreated without status, deleted again
                if deployment["deleted"]
                else deployment_status(
                    replicas,
                    ready,
                    complete=ready >= replicas,
                    elapsed_s=now - plan.started,
                    deadline_s=float(deployment["progress_deadline_s"]),
                )
            )
        conditions = kserve.status.conditions(release, statuses["head"], statuses["worker"])
        result.append({"name": group["isvc"], "namespace": group["namespace"], **conditions})
    return result


def exec_in_pod(
    prefix: str, pod: str, argv: Sequence[str], container: str | None = None
) -> list[str]:
    """The command line that runs ``argv`` in a running container of ``pod`` (``kubectl exec``)."""
    state = ClusterState(prefix)
    plan = state.load_plan()
    current = state.load_status()
    if plan is None:
        raise UserError(
            f"no local cluster with prefix {prefix!r} is up: run `multinode-llm-local up`"
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
            "see `multinode-llm-local status`"
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
        f"{head.directory} and `multinode-llm-local status`; "
        "`multinode-llm-local down` removes the cluster"
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
    release: kserve.Release,
    reconciled: list[kserve.Reconciled],
    objects: list[Obj],
    claims: Mapping[str, Path],
    listener: socket.socket,
) -> ClusterPlan:
    """Schedule the pods, give the running ones a namespace and address, plan their containers."""
    scheduled = _schedule(reconciled, options.node_gpus)
    addresses: dict[str, str] = {}
    for pod in scheduled:
        if not pod.pending:
            addresses[pod.name] = network.add_host(pod.host).ip
    services = _service_names(reconciled, scheduled, addresses)
    pods: list[PodPlan] = []
    for pod in scheduled:
        identity = PodIdentity(
            name=pod.name,
            namespace=pod.group.namespace,
            ip=addresses.get(pod.name, ""),
            netns=f"{options.prefix}-{pod.host}" if not pod.pending else "",
            role=pod.workload.role,
            labels=pod.workload.labels,
            annotations=pod.workload.annotations,
            directory=state.pod_dir(pod.name),
            gpus=pod.gpus,
            host_ip=network.gateway,
        )
        planned = plan_pod(identity, pod.workload.pod_spec, objects, claims)
        if pod.pending:
            planned = PodPlan(**{**planned.__dict__, "pending": pod.pending})
        else:
            network.set_hosts(network.hosts[pod.host], {**services, pod.name: identity.ip})
        pods.append(planned)
    first = reconciled[0]
    head = first.head
    target = int((head.container.get("ports") or [{"containerPort": 8080}])[0]["containerPort"])
    host, port = listener.getsockname()[:2]
    forward = Forward(
        host=host,
        port=port,
        service=head.name,
        role="head",
        target_port=target,
        selector={"app": head.labels["app"]},
    )
    return ClusterPlan(
        prefix=options.prefix,
        subnet=str(network.subnet),
        release=options.release,
        namespace=first.namespace,
        isvc=first.isvc_name,
        pods=pods,
        forward=forward,
        services=services,
        kserve=release.version,
        started=time.time(),
        groups=[_group_record(each) for each in reconciled],
    )


def _group_record(reconciled: kserve.Reconciled) -> dict[str, object]:
    """What ``status`` needs to tell the InferenceService's conditions: its Deployments."""
    return {
        "isvc": reconciled.isvc_name,
        "namespace": reconciled.namespace,
        "deployments": [
            {
                "name": w.name,
                "role": w.role,
                "replicas": w.replicas,
                "app": w.labels["app"],
                "progress_deadline_s": w.progress_deadline_s,
                "deleted": w.name in reconciled.deleted,
            }
            for w in (reconciled.head, reconciled.worker)
        ],
    }


@dataclass(frozen=True)
class _Scheduled:
    """One replica: its group, workload, pod name, host (netns suffix), GPUs, why it is Pending."""

    group: kserve.Reconciled
    workload: kserve.Workload
    name: str
    host: str
    gpus: int
    pending: str


def _schedule(reconciled: list[kserve.Reconciled], node_gpus: int) -> list[_Scheduled]:
    """Every replica of every surviving Deployment, the first release's head first.

    One node with ``node_gpus`` mocked GPUs (0: unlimited): a pod whose GPU request does not fit
    in what is left stays Pending with the scheduler's message, as on a cluster short of GPUs.
    The first group's pods live in netns ``<prefix>-head`` and ``<prefix>-wN``, later groups'
    in ``<prefix>-gG-head`` and ``<prefix>-gG-wN``.
    """
    left = node_gpus if node_gpus > 0 else None
    result: list[_Scheduled] = []
    for number, group in enumerate(reconciled):
        for workload in group.workloads:
            gpus = group.head_gpus if workload.role == "head" else group.worker_gpus
            template_hash = hashlib.sha256(repr(workload.pod_spec).encode()).hexdigest()[:10]
            for _ in range(workload.replicas):
                suffix = "".join(secrets.choice(_POD_SUFFIX) for _ in range(5))
                host = "head" if workload.role == "head" else f"w{len(result)}"
                if number:
                    host = f"g{number}-{host}"
                pending = ""
                if left is not None:
                    if gpus > left:
                        resource = _gpu_resource(workload.pod_spec)
                        pending = f"0/1 nodes are available: 1 Insufficient {resource}."
                    else:
                        left -= gpus
                name = f"{workload.name}-{template_hash}-{suffix}"
                result.append(_Scheduled(group, workload, name, host, gpus, pending))
    return result


def _gpu_resource(pod_spec: Obj) -> str:
    """The GPU resource the scheduler names for a pod that does not fit: the first of KServe's
    default GPU types its first container asks for, else KServe's default (nvidia.com/gpu)."""
    limits = (pod_spec["containers"][0].get("resources") or {}).get("limits") or {}
    known = kserve.admission.KSERVE_DEFAULT_GPU_TYPES
    return next((name for name in limits if name in known), known[0])


def _service_names(
    reconciled: list[kserve.Reconciled],
    scheduled: list[_Scheduled],
    addresses: Mapping[str, str],
) -> dict[str, list[str]]:
    """The DNS names of the headless Services (every form a pod may use) -> their pods' IPs."""
    names: dict[str, list[str]] = {}
    for group in reconciled:
        for service in group.running_services:
            if not service.headless:
                continue
            ips = [
                addresses[pod.name]
                for pod in scheduled
                if not pod.pending
                and all(pod.workload.labels.get(k) == v for k, v in service.selector.items())
            ]
            short = f"{service.name}.{group.namespace}"
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
    """The runtime's tiny-model maker (``local/model.py``), imported only when a model is made,
    its files then readable by the pods' user."""
    importlib.import_module("multinode_llm_local.model").make_model(directory)
    make_readable(directory)


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
        "multinode_llm_local.kubelet",
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
