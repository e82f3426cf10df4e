"""From a pod template to what the local kubelet runs: argv, environment, user, mounts and probes.

This is the kubelet's side of a pod spec, applied to the host instead of an image: the "image" is
this machine's filesystem and the Python environment the local cluster runs from, so ``image`` is
not pulled and the container's ``command`` must name a program found here (``multinode-llm``),
unless ``local/images.py`` points the container at a built image's root filesystem.
The plan is plain data (JSON in the cluster's state directory) so the kubelet daemon, ``status``
and the tests read the same thing.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local.k8s import Obj, find, quantity

# The local cluster's stand-ins for a GPU node: a platform plugin that makes vLLM's CPU platform
# claim Ray's "GPU" resource, and a small KV cache so several engines fit on one machine. Only the
# local cluster sets these (docs/cpu-groups.md, "The fake GPU").
GPU_MOCK_ENV: Mapping[str, str] = {"MULTINODE_LLM_GPU_MOCK": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
# The mp executor's pods (MULTINODE_LLM_EXECUTOR=mp) keep the fake GPU for one thing: vLLM's
# mp executor counts a node's ranks by the platform's device count, which the CPU platform gives
# as 1; the mock reports the pod's GPUs instead (gpu_mock.DEVICES_ENV). Their ranks bind their
# threads to their node's cores (vLLM's "auto": core 0 of this one machine for every pod's rank);
# unbound, they share the machine's cores as the Ray executor's ranks do. Unbound, each rank's
# OpenMP would also start a thread per core of the machine: two ranks spinning on two cores served
# 0.12x the Ray group's throughput (bench/group.py), so each gets one, as Ray starts its workers
# with OMP_NUM_THREADS=1. A container that sets either variable itself keeps its value.
MP_ENV: Mapping[str, str] = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
# vLLM 0.32's CPU build cannot load the AOT-compiled artifacts it saves itself: a start with a warm
# cache logs "Compiling model again due to a load failure ... 'function' object has no attribute
# 'finalize_loading'" (vllm/compilation/decorators.py; on CPU inductor is off, so the compiled
# function is a plain one) and compiles again. Without AOT compilation a warm start reuses the
# torch.compile cache: one plain server (the tiny model, on the CPUs here) restarted with its cache
# was ready in 22.4 s instead of 27.1 s, 45.2 s cold. So every pod the local cluster runs (only
# vLLM reads it) starts without it (docs/cpu-groups.md); a GPU build loads its artifacts and needs
# no such thing. A container that sets it itself keeps its value, as with MP_ENV.
CPU_VLLM_ENV: Mapping[str, str] = {"VLLM_USE_AOT_COMPILE": "0"}
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SHM_BYTES = 64 * 2**20  # a container runtime's /dev/shm when the pod mounts none
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass(frozen=True)
class Probe:
    """A container probe with Kubernetes' defaults filled in."""

    kind: str  # "http", "tcp" or "exec"
    port: int = 0
    path: str = "/"
    host: str = ""
    scheme: str = "HTTP"
    headers: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3
    grace: float | None = None  # probe-level terminationGracePeriodSeconds


@dataclass(frozen=True)
class Mount:
    """One mount inside the container's mount namespace."""

    target: str
    kind: str  # "bind" or "tmpfs"
    source: str = ""
    read_only: bool = False
    size_bytes: int | None = None
    # How the container's init makes a missing source: None, an emptyDir's directory (mode 0777,
    # as kubelet makes it); else a claim's subPath, each missing folder owned by owner_uid:owner_gid
    # with this mode (_subpath_owner).
    owner_uid: int | None = None
    owner_gid: int | None = None
    mode: int | None = None


@dataclass(frozen=True)
class ContainerPlan:
    """Everything needed to start one container as processes on this machine."""

    name: str
    argv: list[str]
    env: dict[str, str]
    workdir: str
    uid: int
    gid: int
    groups: list[int]
    no_new_privs: bool
    drop_capabilities: bool
    read_only_root: bool
    mounts: list[Mount]
    startup: Probe | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None
    # Named container ports (name -> containerPort): what a PodMonitor's endpoint `port` selects.
    ports: dict[str, int] = field(default_factory=dict)
    image: str = ""  # the pod spec's image reference (local/images.py maps it to a built image)
    # Set where the container runs from a built image (local/images.py): its mounted root
    # filesystem and the buildah working container that holds it. Empty: this machine's Python.
    rootfs: str = ""
    working_container: str = ""
    # Folders of this machine an image provided for a test runs from (controlplane/runtime.py),
    # shared into the container beside this Python environment.
    image_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PodPlan:
    """One pod: its identity, network namespace, containers and GPU count."""

    name: str
    namespace: str
    role: str
    netns: str
    ip: str
    labels: dict[str, str]
    containers: list[ContainerPlan]
    grace: float
    gpus: int
    directory: str
    pending: str = ""  # why the pod cannot be scheduled; empty when it runs

    def to_json(self) -> Obj:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Obj) -> PodPlan:
        containers = [_container_from_json(c) for c in data["containers"]]
        return cls(**{**data, "containers": containers})


@dataclass(frozen=True)
class PodIdentity:
    """What the API server and scheduler decide about a pod before the kubelet sees it."""

    name: str
    namespace: str
    ip: str
    netns: str
    role: str
    labels: dict[str, str]
    annotations: dict[str, str]
    directory: Path
    gpus: int
    host_ip: str = ""
    uid: str = ""  # empty: the local cluster's own ("local-<name>")
    node_name: str = "local"
    service_account: str = "default"
    token: str = ""  # the service-account token a projected volume holds (the real cluster's)


def plan_pod(
    identity: PodIdentity,
    pod_spec: Obj,
    objects: list[Obj],
    claims: Mapping[str, Path],
    own_roots: frozenset[str] = frozenset(),
) -> PodPlan:
    """The kubelet's view of one pod: containers resolved against this host (``own_roots``: the
    containers whose image has a root filesystem of its own, where any mount point may be made)."""
    containers = [
        plan_container(
            identity, pod_spec, container, objects, claims, container["name"] in own_roots
        )
        for container in pod_spec["containers"]
    ]
    return PodPlan(
        name=identity.name,
        namespace=identity.namespace,
        role=identity.role,
        netns=identity.netns,
        ip=identity.ip,
        labels=identity.labels,
        containers=containers,
        grace=float(pod_spec.get("terminationGracePeriodSeconds", 30)),
        gpus=identity.gpus,
        directory=str(identity.directory),
    )


def plan_container(
    identity: PodIdentity,
    pod_spec: Obj,
    container: Obj,
    objects: list[Obj],
    claims: Mapping[str, Path],
    own_root: bool = False,
) -> ContainerPlan:
    name = container["name"]
    what = f"pod {identity.name}, container {name}"
    if not container.get("command"):
        raise UserError(
            f"{what} has no command: the local cluster runs no image entrypoint, "
            "so the container must set command (for example [multinode-llm])"
        )
    uid, gid, groups = run_as(pod_spec, container, what)
    env = container_env(identity, container, objects, uid)
    argv = [expand(arg, env) for arg in [*container["command"], *(container.get("args") or [])]]
    security = container.get("securityContext") or {}
    capabilities = security.get("capabilities") or {}
    mounts = container_mounts(identity, pod_spec, container, objects, claims, env, own_root)
    for mount in mounts:
        if mount.kind == "bind" and any(
            Path(mount.source).is_relative_to(c) for c in claims.values()
        ):
            _check_readable(Path(mount.source), uid, {gid, *groups}, what)
    return ContainerPlan(
        name=name,
        argv=argv,
        env=env,
        workdir=container.get("workingDir") or "/",
        uid=uid,
        gid=gid,
        groups=groups,
        no_new_privs=security.get("allowPrivilegeEscalation") is False,
        drop_capabilities="ALL" in (capabilities.get("drop") or []),
        read_only_root=bool(security.get("readOnlyRootFilesystem")),
        mounts=mounts,
        startup=parse_probe(container.get("startupProbe"), container, what),
        readiness=parse_probe(container.get("readinessProbe"), container, what),
        liveness=parse_probe(container.get("livenessProbe"), container, what),
        ports={
            str(port["name"]): int(port["containerPort"])
            for port in container.get("ports") or []
            if port.get("name")
        },
        image=str(container.get("image") or ""),
    )


def _check_readable(root: Path, uid: int, gids: set[int], what: str) -> None:
    """Refuse a claim the pod's user could not read (kubelet would start it, and it would fail)."""
    if uid == 0:
        return
    for directory, _, files in os.walk(root):
        for path in [Path(directory), *(Path(directory) / name for name in files)]:
            info = path.stat()
            need = 0o5 if path.is_dir() else 0o4
            if info.st_uid == uid:
                allowed = (info.st_mode >> 6) & need == need
            elif info.st_gid in gids:
                allowed = (info.st_mode >> 3) & need == need
            else:
                allowed = info.st_mode & need == need
            if not allowed:
                raise UserError(
                    f"{what}: {path} (mode {info.st_mode & 0o777:o}, owner uid {info.st_uid}) is "
                    f"not readable by uid {uid}, the pod's user: chmod -R a+rX {root}"
                )


def run_as(pod_spec: Obj, container: Obj, what: str) -> tuple[int, int, list[int]]:
    """(uid, gid, supplementary groups) from the pod's and the container's security contexts."""
    pod_security = pod_spec.get("securityContext") or {}
    security = {**pod_security, **(container.get("securityContext") or {})}
    uid = int(security.get("runAsUser", 0))
    gid = int(security.get("runAsGroup", 0))  # a numeric user unknown to the image gets group 0
    if security.get("runAsNonRoot") and uid == 0:
        raise UserError(
            f"{what}: container has runAsNonRoot and image will run as root: set runAsUser "
            "to a non-zero user id"
        )
    groups = [int(g) for g in pod_security.get("supplementalGroups") or []]
    if "fsGroup" in pod_security:
        groups.append(int(pod_security["fsGroup"]))
    return uid, gid, sorted(set(groups))


def container_env(
    identity: PodIdentity, container: Obj, objects: list[Obj], uid: int
) -> dict[str, str]:
    """The container's environment as kubelet builds it: image defaults, envFrom, env, $(VAR)."""
    env: dict[str, str] = {
        "PATH": f"{Path(sys.executable).parent}:{IMAGE_PATH}",
        "HOSTNAME": identity.name,
        "HOME": _home_of(uid),
    }
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for key, value in _env_source_data(source, objects).items():
            env[prefix + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" in var:
            resolved = _value_from(var["valueFrom"], identity, container, objects, name)
            if resolved is not None:
                env[name] = resolved
        else:
            env[name] = expand(str(var.get("value", "")), env)
    env.update(GPU_MOCK_ENV)
    env = {**CPU_VLLM_ENV, **env}
    if env.get("MULTINODE_LLM_EXECUTOR") == "mp":
        env = {**MP_ENV, **env, "MULTINODE_LLM_GPU_MOCK_DEVICES": str(max(identity.gpus, 1))}
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known names replaced, unknown kept, ``$$`` escapes a ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def parse_probe(spec: Obj | None, container: Obj, what: str) -> Probe | None:
    if not spec:
        return None
    grace = spec.get("terminationGracePeriodSeconds")
    timing = Probe(
        kind="",
        initial_delay=float(spec.get("initialDelaySeconds", 0)),
        period=float(spec.get("periodSeconds", 10)),
        timeout=float(spec.get("timeoutSeconds", 1)),
        success_threshold=int(spec.get("successThreshold", 1)),
        failure_threshold=int(spec.get("failureThreshold", 3)),
        grace=float(grace) if grace is not None else None,
    )
    if "httpGet" in spec:
        action = spec["httpGet"]
        return replace(
            timing,
            kind="http",
            port=_port(action.get("port"), container, what),
            path=action.get("path", "/"),
            host=action.get("host", ""),
            scheme=action.get("scheme", "HTTP"),
            headers={h["name"]: h["value"] for h in action.get("httpHeaders") or []},
        )
    if "tcpSocket" in spec:
        action = spec["tcpSocket"]
        port = _port(action.get("port"), container, what)
        return replace(timing, kind="tcp", port=port, host=action.get("host", ""))
    if "exec" in spec:
        return replace(timing, kind="exec", command=list(spec["exec"].get("command") or []))
    raise UserError(
        f"{what}: a probe has no httpGet, tcpSocket or exec action the local cluster can run"
    )


def container_mounts(
    identity: PodIdentity,
    pod_spec: Obj,
    container: Obj,
    objects: list[Obj],
    claims: Mapping[str, Path],
    env: Mapping[str, str],
    own_root: bool = False,
) -> list[Mount]:
    """The container's volume mounts resolved to host directories and tmpfs, shallowest first.

    A container that runs in this machine's root gets its mount points under this root's existing
    top folders only; one with a root filesystem of its own (``own_root``: a Go image) gets any,
    made in that root as a container runtime makes them (container.py)."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    mounts: list[Mount] = []
    owner = _subpath_owner(pod_spec, container, f"pod {identity.name}")
    for spec in container.get("volumeMounts") or []:
        volume = volumes.get(spec["name"])
        what = f"pod {identity.name}, volume {spec['name']!r}"
        if volume is None:
            raise UserError(f"{what} is mounted at {spec['mountPath']} but not declared in volumes")
        sub_path = spec.get("subPath") or expand(spec.get("subPathExpr", ""), env)
        top = Path("/", *Path(spec["mountPath"]).parts[1:2])
        if not own_root and not top.exists():
            raise UserError(
                f"{what}: mountPath {spec['mountPath']}: {top} does not exist on this machine "
                "and the local cluster does not write to the host's /: "
                "mount it below an existing directory"
            )
        mounts.append(_mount(volume, spec, sub_path, identity, objects, claims, owner, what))
    targets = {m.target for m in mounts}
    # The container's own /dev/shm and /tmp, as its runtime and image layer would give it.
    for private, size in (("/dev/shm", DEFAULT_SHM_BYTES), ("/tmp", None)):  # noqa: S108
        if private not in targets:
            mounts.append(Mount(target=private, kind="tmpfs", size_bytes=size))
    return sorted(mounts, key=lambda m: m.target.count("/"))


def _mount(
    volume: Obj,
    spec: Obj,
    sub_path: str,
    identity: PodIdentity,
    objects: list[Obj],
    claims: Mapping[str, Path],
    owner: tuple[int, int, int],
    what: str,
) -> Mount:
    target = spec["mountPath"]
    read_only = bool(spec.get("readOnly"))
    if "emptyDir" in volume:
        empty_dir = volume["emptyDir"] or {}
        size = empty_dir.get("sizeLimit")
        size_bytes = int(quantity(size, f"{what} sizeLimit")) if size else None
        if empty_dir.get("medium") == "Memory":
            return Mount(target=target, kind="tmpfs", read_only=read_only, size_bytes=size_bytes)
        directory = identity.directory / "volumes" / volume["name"]
        return Mount(
            target=target, kind="bind", source=str(directory / sub_path), read_only=read_only
        )
    if "persistentVolumeClaim" in volume:
        claim = volume["persistentVolumeClaim"]["claimName"]
        if claim not in claims:
            raise UserError(
                f"{what}: no local directory stands in for PersistentVolumeClaim {claim!r}: "
                f"pass --volume {claim}=DIR"
            )
        source = claims[claim] / sub_path
        read_only = read_only or bool(volume["persistentVolumeClaim"].get("readOnly"))
        if source.exists():
            return Mount(target=target, kind="bind", source=str(source), read_only=read_only)
        if read_only:
            # kubelet would create this folder too, but a read-only mount of a claim is the model
            # KServe mounts from the storageUri: an empty folder would only fail later, in vLLM,
            # far from the cause, so the local cluster says what to put there instead.
            raise UserError(
                f"{what}: {source} (claim {claim!r}, subPath {sub_path!r}) does not exist: "
                "put the model there (multinode-llm-local make-model DIR) or fix the storageUri"
            )
        # A writable subPath that is missing (the shared compile cache's folder): kubelet creates
        # it at container start, and so does the container's init, owned as _subpath_owner says.
        uid, gid, mode = owner
        return Mount(
            target=target, kind="bind", source=str(source), owner_uid=uid, owner_gid=gid, mode=mode
        )
    for kind, key in (("configMap", "name"), ("secret", "secretName")):
        if kind in volume:
            directory = identity.directory / "volumes" / volume["name"]
            _write_projection(volume[kind], kind, key, objects, directory, what)
            return Mount(
                target=target, kind="bind", source=str(directory / sub_path), read_only=True
            )
    if "projected" in volume or "downwardAPI" in volume:
        directory = identity.directory / "volumes" / volume["name"]
        _write_projected(volume, identity, objects, directory, what)
        return Mount(target=target, kind="bind", source=str(directory / sub_path), read_only=True)
    if "hostPath" in volume:
        source = Path(volume["hostPath"]["path"]) / sub_path
        return Mount(target=target, kind="bind", source=str(source), read_only=read_only)
    kinds = sorted(set(volume) - {"name"})
    raise UserError(
        f"{what}: volume type {kinds} is not supported by the local cluster "
        "(it runs emptyDir, persistentVolumeClaim, configMap, secret, projected, downwardAPI "
        "and hostPath)"
    )


def _subpath_owner(pod_spec: Obj, container: Obj, what: str) -> tuple[int, int, int]:
    """(uid, gid, mode) of the folders a missing subPath of a claim is made of.

    kubelet creates them (makeMounts, SafeMakeDir) with the mode of the volume's root, inside a
    volume whose root it has given to the pod's fsGroup (group-writable and setgid, so new folders
    inherit the group). A local claim is a directory kubelet never chowned, so the folders are
    given what fsGroup would give: the pod's user, the fsGroup (else the user's group), and
    rwxrwsr-x with an fsGroup, rwxr-xr-x without: the pod's user can write either way.
    """
    uid, gid, _ = run_as(pod_spec, container, what)
    fs_group = (pod_spec.get("securityContext") or {}).get("fsGroup")
    if fs_group is None:
        return uid, gid, 0o755
    return uid, int(fs_group), 0o2775


def _write_projection(
    source: Obj, kind: str, key: str, objects: list[Obj], directory: Path, what: str
) -> None:
    """Write a configMap/secret volume's files, as the kubelet does before the container starts."""
    data = _object_data(kind, source[key], objects, bool(source.get("optional")), what)
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    directory.mkdir(parents=True, exist_ok=True)
    mode = int(source.get("defaultMode", 0o644))
    for item in items:
        path = directory / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data.get(item["key"], ""))
        path.chmod(int(item.get("mode", mode)))


def _write_projected(
    volume: Obj, identity: PodIdentity, objects: list[Obj], directory: Path, what: str
) -> None:
    """A projected or downwardAPI volume's files: the service-account token (the identity's),
    configMap and secret keys, and downward-API fields (what a kubelet writes into
    ``kube-api-access-*``, which the API server adds to every pod that mounts its token)."""
    if "downwardAPI" in volume:
        sources = [{"downwardAPI": volume["downwardAPI"]}]
        mode = int(volume["downwardAPI"].get("defaultMode", 0o644))
    else:
        sources = volume["projected"].get("sources") or []
        mode = int(volume["projected"].get("defaultMode", 0o644))
    files: dict[str, tuple[str, int]] = {}
    for source in sources:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            files[token.get("path", "token")] = (identity.token, mode)
        for kind, key in (("configMap", "name"), ("secret", "name")):
            if kind in source:
                ref = source[kind]
                data = _object_data(kind, ref[key], objects, bool(ref.get("optional")), what)
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    files[item["path"]] = (data.get(item["key"], ""), int(item.get("mode", mode)))
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            if "fieldRef" not in item:
                raise UserError(f"{what}: downwardAPI item {item['path']!r} needs a fieldRef")
            value = _field_ref(item["fieldRef"]["fieldPath"], identity, what)
            files[item["path"]] = (value, int(item.get("mode", mode)))
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, file_mode) in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(file_mode)


def _object_data(
    kind: str, name: str, objects: list[Obj], optional: bool, what: str
) -> dict[str, str]:
    import base64

    found = find(objects, "ConfigMap" if kind == "configMap" else "Secret", name)
    if not found:
        if optional:
            return {}
        raise UserError(
            f"{what}: {kind} {name!r} is not among the rendered objects: render it with the chart"
        )
    obj = found[0]
    data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    if kind == "secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
    return data


def _env_source_data(source: Obj, objects: list[Obj]) -> dict[str, str]:
    for kind, field_name in (("configMap", "configMapRef"), ("secret", "secretRef")):
        if field_name in source:
            ref = source[field_name]
            return _object_data(kind, ref["name"], objects, bool(ref.get("optional")), "envFrom")
    return {}


def _value_from(
    value_from: Obj, identity: PodIdentity, container: Obj, objects: list[Obj], name: str
) -> str | None:
    what = f"pod {identity.name}, env {name}"
    if "fieldRef" in value_from:
        return _field_ref(value_from["fieldRef"]["fieldPath"], identity, what)
    if "resourceFieldRef" in value_from:
        return _resource_field(value_from["resourceFieldRef"], container, what)
    for kind, key in (("configMap", "configMapKeyRef"), ("secret", "secretKeyRef")):
        if key in value_from:
            ref = value_from[key]
            data = _object_data(kind, ref["name"], objects, bool(ref.get("optional")), what)
            if ref["key"] not in data and not ref.get("optional"):
                raise UserError(f"{what}: key {ref['key']!r} is not in {kind} {ref['name']!r}")
            return data.get(ref["key"])
    raise UserError(f"{what}: valueFrom {sorted(value_from)} is not supported by the local cluster")


def _field_ref(path: str, identity: PodIdentity, what: str) -> str:
    simple = {
        "metadata.name": identity.name,
        "metadata.namespace": identity.namespace,
        "metadata.uid": identity.uid or f"local-{identity.name}",
        "spec.nodeName": identity.node_name,
        "spec.serviceAccountName": identity.service_account,
        "status.podIP": identity.ip,
        "status.podIPs": identity.ip,
        "status.hostIP": identity.host_ip,
        "status.hostIPs": identity.host_ip,
    }
    if path in simple:
        return simple[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        source = identity.labels if match.group(1) == "labels" else identity.annotations
        return source.get(match.group(2), "")
    raise UserError(f"{what}: fieldRef {path!r} is not a field the downward API offers")


def _resource_field(ref: Obj, container: Obj, what: str) -> str:
    resource = ref["resource"]  # e.g. limits.cpu
    kind, _, name = resource.partition(".")
    values = (container.get("resources") or {}).get(kind) or {}
    if name in values:
        amount = quantity(values[name], f"{what} {resource}")
    elif name == "cpu":
        amount = quantity(os.cpu_count() or 1, "cpu")  # unset: the node's allocatable
    elif name == "memory":
        amount = quantity(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "memory")
    else:
        raise UserError(f"{what}: resourceFieldRef {resource!r} is not set on the container")
    divisor = quantity(ref.get("divisor", "1"), f"{what} divisor")
    return str(math.ceil(amount / divisor))


def _port(port: Any, container: Obj, what: str) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise UserError(f"{what}: probe port {port!r} names no port of the container")


def _home_of(uid: int) -> str:
    """HOME as a container runtime sets it for an image that knows only root: /root, else /."""
    return "/root" if uid == 0 else "/"


def _container_from_json(data: Obj) -> ContainerPlan:
    probes = {
        key: Probe(**data[key]) if data.get(key) else None
        for key in ("startup", "readiness", "liveness")
    }
    mounts = [Mount(**m) for m in data["mounts"]]
    return ContainerPlan(**{**data, **probes, "mounts": mounts})


def make_readable(directory: Path) -> None:
    """Every file under ``directory`` readable, and every folder enterable, by every user: the pods
    run as the chart's non-root user, and safetensors writes its files for their owner only."""
    for path in [directory, *directory.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
