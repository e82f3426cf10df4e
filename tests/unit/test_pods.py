"""Pods as the local kubelet runs them: environment, user, mounts and probes from a pod spec; the
scheduling and Service names of ``local up``; the state files."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm.errors import UserError
from multinode_llm_local import cluster, kserve
from multinode_llm_local.pods import (
    GPU_MOCK_ENV,
    Mount,
    PodIdentity,
    PodPlan,
    expand,
    make_readable,
    plan_pod,
)
from multinode_llm_local.state import ClusterPlan, ClusterState, Forward, process_alive

RENDERED = Path(__file__).with_name("data") / "rendered-multinode.yaml"


def _identity(tmp_path: Path) -> PodIdentity:
    return PodIdentity(
        name="demo-predictor-abc-xyz12",
        namespace="serving",
        ip="10.230.9.2",
        netns="mnl-head",
        role="head",
        labels={"app": "isvc.demo-predictor", "team": "llm"},
        annotations={"note": "hi"},
        directory=tmp_path / "pod",
        gpus=2,
        host_ip="10.230.9.1",
    )


def _pod_spec(**container: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "command": ["multinode-llm"], **container}]}


def test_env_follows_kubernetes_order_downward_api_and_expansion(
    tmp_path: Path,
) -> None:
    objects = [
        {
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"MODE": "fast", "X": "1"},
        },
        {
            "kind": "Secret",
            "metadata": {"name": "sec"},
            "data": {"TOKEN": base64.b64encode(b"s3").decode()},
        },
    ]
    spec = _pod_spec(
        args=["--address=$(POD_IP):$(RAY_PORT)", "$$(POD_IP)", "$(UNKNOWN)"],
        envFrom=[{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        env=[
            {
                "name": "POD_IP",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
            },
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
            },
            {
                "name": "NS",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {
                "name": "TEAM",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}},
            },
            {"name": "RAY_PORT", "value": "6379"},
            {"name": "ADDRESS", "value": "$(POD_IP):$(RAY_PORT)"},
            {
                "name": "TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}},
            },
            {
                "name": "MODE",
                "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}},
            },
            {
                "name": "CPUS",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
        ],
        resources={"limits": {"memory": "2Gi"}},
    )
    container = plan_pod(_identity(tmp_path), spec, objects, {}).containers[0]
    env = container.env
    assert env["POD_IP"] == "10.230.9.2"
    assert env["POD_NAME"] == "demo-predictor-abc-xyz12"
    assert env["NS"] == "serving"
    assert env["TEAM"] == "llm"
    assert env["ADDRESS"] == "10.230.9.2:6379"
    assert env["TOKEN"] == "s3"
    assert env["MODE"] == "fast"
    assert env["CFG_X"] == "1"
    assert env["CPUS"] == "2048"
    assert env["HOSTNAME"] == "demo-predictor-abc-xyz12"
    assert env["PATH"].startswith(str(Path(sys.executable).parent) + ":")
    assert container.argv == [
        "multinode-llm",
        "--address=10.230.9.2:6379",
        "$(POD_IP)",
        "$(UNKNOWN)",
    ]


def test_the_local_cluster_mocks_gpus_for_every_pod_and_nothing_else_does(
    tmp_path: Path,
) -> None:
    env = plan_pod(_identity(tmp_path), _pod_spec(), [], {}).containers[0].env
    assert {k: env[k] for k in GPU_MOCK_ENV} == {
        "MULTINODE_LLM_GPU_MOCK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    assert "MULTINODE_LLM_GPU_MOCK" not in RENDERED.read_text()


def test_every_pod_runs_vllm_without_aot_compile_unless_the_container_says_otherwise(
    tmp_path: Path,
) -> None:
    """vLLM 0.32's CPU build cannot load its own AOT artifacts (pods.CPU_VLLM_ENV)."""
    for executor in ("ray", "mp"):
        spec = _pod_spec(env=[{"name": "MULTINODE_LLM_EXECUTOR", "value": executor}])
        assert (
            plan_pod(_identity(tmp_path), spec, [], {}).containers[0].env["VLLM_USE_AOT_COMPILE"]
            == "0"
        ), executor
    spec = _pod_spec(env=[{"name": "VLLM_USE_AOT_COMPILE", "value": "1"}])
    assert (
        plan_pod(_identity(tmp_path), spec, [], {}).containers[0].env["VLLM_USE_AOT_COMPILE"] == "1"
    )
    assert "VLLM_USE_AOT_COMPILE" not in RENDERED.read_text()


def test_mp_pods_get_their_gpu_count_and_unbound_ranks_unless_the_container_says_otherwise(
    tmp_path: Path,
) -> None:
    def env_of(*extra: dict[str, str]) -> dict[str, str]:
        spec = _pod_spec(env=[{"name": "MULTINODE_LLM_EXECUTOR", "value": "mp"}, *extra])
        return plan_pod(_identity(tmp_path), spec, [], {}).containers[0].env

    assert env_of()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert env_of()["OMP_NUM_THREADS"] == "1"
    assert env_of()["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # the fake GPU counts the pod's two GPUs as vLLM's local devices
    assert (env_of()["MULTINODE_LLM_GPU_MOCK"], env_of()["MULTINODE_LLM_GPU_MOCK_DEVICES"]) == (
        "1",
        "2",
    )
    kept = env_of({"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "auto"})
    assert kept["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert env_of({"name": "OMP_NUM_THREADS", "value": "2"})["OMP_NUM_THREADS"] == "2"
    ray = plan_pod(_identity(tmp_path), _pod_spec(), [], {}).containers[0].env
    assert "VLLM_CPU_OMP_THREADS_BIND" not in ray
    assert "OMP_NUM_THREADS" not in ray
    assert "MULTINODE_LLM_GPU_MOCK_DEVICES" not in ray  # Ray keeps the CPU platform's count


def test_expand_leaves_unknown_references_and_unescapes_dollars() -> None:
    assert expand("$(A)-$(B)-$$(A)-$$-$", {"A": "1"}) == "1-$(B)-$(A)-$-$"


def test_the_container_runs_as_the_security_context_user(tmp_path: Path) -> None:
    spec = {
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 2000,
            "supplementalGroups": [3000],
        },
        **_pod_spec(
            securityContext={
                "runAsUser": 1001,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
            }
        ),
    }
    container = plan_pod(_identity(tmp_path), spec, [], {}).containers[0]
    assert (container.uid, container.gid, container.groups) == (
        1001,
        1000,
        [2000, 3000],
    )
    assert container.no_new_privs
    assert container.drop_capabilities
    assert container.read_only_root
    assert container.env["HOME"] == "/"  # an image that knows only root gives other users "/"


def test_run_as_non_root_refuses_root(tmp_path: Path) -> None:
    spec = {"securityContext": {"runAsNonRoot": True}, **_pod_spec()}
    with pytest.raises(UserError, match="runAsNonRoot and image will run as root"):
        plan_pod(_identity(tmp_path), spec, [], {})


def test_a_container_without_command_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no image entrypoint"):
        plan_pod(_identity(tmp_path), {"containers": [{"name": "c"}]}, [], {})


def test_volumes_become_tmpfs_and_bind_mounts(tmp_path: Path) -> None:
    claim = tmp_path / "claim"
    (claim / "tiny").mkdir(parents=True)
    spec = {
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "model", "persistentVolumeClaim": {"claimName": "models"}},
        ],
        **_pod_spec(
            volumeMounts=[
                {"name": "shm", "mountPath": "/dev/shm"},
                {"name": "scratch", "mountPath": "/tmp"},
                {
                    "name": "model",
                    "mountPath": "/mnt/models",
                    "subPath": "tiny",
                    "readOnly": True,
                },
            ]
        ),
    }
    mounts = plan_pod(_identity(tmp_path), spec, [], {"models": claim}).containers[0].mounts
    assert mounts == [
        Mount(
            target="/tmp",
            kind="bind",
            source=str(tmp_path / "pod" / "volumes" / "scratch"),
            read_only=False,
        ),
        Mount(target="/dev/shm", kind="tmpfs", size_bytes=2 * 2**30),
        Mount(
            target="/mnt/models",
            kind="bind",
            source=str(claim / "tiny"),
            read_only=True,
        ),
    ]


def test_a_mount_point_outside_the_hosts_folders_needs_an_image_root_of_its_own(
    tmp_path: Path,
) -> None:
    """LeaderWorkerSet's manager mounts its config file at /controller_manager_config.yaml: a
    container in this machine's root may not make it, one in a Go image's root may."""
    spec = {
        "volumes": [{"name": "config", "emptyDir": {}}],
        **_pod_spec(volumeMounts=[{"name": "config", "mountPath": "/no-such-top/config.yaml"}]),
    }
    with pytest.raises(UserError, match=r"/no-such-top does not exist on this machine"):
        plan_pod(_identity(tmp_path), spec, [], {})
    plan = plan_pod(_identity(tmp_path), spec, [], {}, own_roots=frozenset({"c"}))
    assert "/no-such-top/config.yaml" in [m.target for m in plan.containers[0].mounts]


def test_every_container_gets_a_private_tmp_and_shm_by_default(tmp_path: Path) -> None:
    mounts = plan_pod(_identity(tmp_path), _pod_spec(), [], {}).containers[0].mounts
    assert {(m.target, m.kind) for m in mounts} == {
        ("/tmp", "tmpfs"),
        ("/dev/shm", "tmpfs"),
    }


def test_a_claim_without_a_local_directory_says_how_to_give_one(tmp_path: Path) -> None:
    spec = {
        "volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "models"}}],
        **_pod_spec(volumeMounts=[{"name": "m", "mountPath": "/mnt/models"}]),
    }
    with pytest.raises(UserError, match="pass --volume models=DIR"):
        plan_pod(_identity(tmp_path), spec, [], {})


def test_a_missing_model_path_on_the_claim_is_named(tmp_path: Path) -> None:
    """A read-only mount (KServe's model mount) of a missing folder fails before any container
    starts, saying what to put there; kubelet would make an empty folder vLLM then fails on."""
    mount = {"name": "m", "mountPath": "/mnt/models", "subPath": "absent", "readOnly": True}
    spec = {
        "volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "models"}}],
        **_pod_spec(volumeMounts=[mount]),
    }
    with pytest.raises(UserError, match=r"absent.*does not exist.*make-model"):
        plan_pod(_identity(tmp_path), spec, [], {"models": tmp_path})


@pytest.mark.parametrize(
    ("security", "owner"),
    [
        ({"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 3000}, (1000, 3000, 0o2775)),
        ({"runAsUser": 1000, "runAsGroup": 1001}, (1000, 1001, 0o755)),
    ],
    ids=["fsGroup", "no fsGroup"],
)
def test_a_missing_writable_subpath_is_left_to_the_container_start_with_its_owner(
    tmp_path: Path, security: dict[str, int], owner: tuple[int, int, int]
) -> None:
    """As kubelet creates it at container start (the shared compile cache's folder); the real
    container's start is in test_kubelet.py."""
    spec = {
        "securityContext": security,
        "volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "models"}}],
        **_pod_spec(
            volumeMounts=[{"name": "m", "mountPath": "/mnt/shared", "subPath": ".cache/compile"}]
        ),
    }
    [mount] = [
        m
        for m in plan_pod(_identity(tmp_path), spec, [], {"models": tmp_path}).containers[0].mounts
        if m.target == "/mnt/shared"
    ]
    assert mount.source == str(tmp_path / ".cache" / "compile")
    assert (mount.owner_uid, mount.owner_gid, mount.mode) == owner
    assert not mount.read_only
    assert not (tmp_path / ".cache").exists()


def test_probes_get_kubernetes_defaults_and_named_ports(tmp_path: Path) -> None:
    spec = _pod_spec(
        ports=[{"name": "status", "containerPort": 8081}, {"containerPort": 6379}],
        readinessProbe={"httpGet": {"path": "/ready", "port": "status"}},
        livenessProbe={
            "tcpSocket": {"port": 8081},
            "periodSeconds": 3,
            "terminationGracePeriodSeconds": 5,
        },
        startupProbe={"exec": {"command": ["true"]}, "failureThreshold": 60},
    )
    container = plan_pod(_identity(tmp_path), spec, [], {}).containers[0]
    assert container.ports == {"status": 8081}  # what a PodMonitor's endpoint can name
    assert container.readiness is not None
    assert (
        container.readiness.kind,
        container.readiness.port,
        container.readiness.path,
    ) == ("http", 8081, "/ready")
    assert (
        container.readiness.period,
        container.readiness.timeout,
        container.readiness.failure_threshold,
    ) == (10, 1, 3)
    assert container.liveness is not None
    assert (
        container.liveness.kind,
        container.liveness.period,
        container.liveness.grace,
    ) == ("tcp", 3, 5)
    assert container.startup is not None
    assert (container.startup.command, container.startup.failure_threshold) == (
        ["true"],
        60,
    )


def _reconciled() -> kserve.Reconciled:
    objects = [doc for doc in yaml.safe_load_all(RENDERED.read_text()) if doc]
    return kserve.reconcile(objects)


def test_pods_that_do_not_fit_the_node_gpus_stay_pending() -> None:
    scheduled = cluster._schedule(
        [_reconciled()], node_gpus=4
    )  # head 2 + one worker 2; the second waits
    assert [pod.pending for pod in scheduled] == [
        "",
        "",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    ]
    names = [pod.name for pod in scheduled]
    assert names[0].startswith("demo-predictor-")
    assert all(name.startswith("demo-predictor-worker-") for name in names[1:])
    assert len(set(names)) == 3
    assert [pod.host for pod in scheduled] == ["head", "w1", "w2"]


def test_headless_service_names_resolve_to_their_scheduled_pods() -> None:
    reconciled = _reconciled()
    scheduled = cluster._schedule([reconciled], node_gpus=0)
    addresses = {pod.name: f"10.0.0.{i + 2}" for i, pod in enumerate(scheduled)}
    names = cluster._service_names([reconciled], scheduled, addresses)
    assert names["demo-head-1.default.svc.cluster.local"] == ["10.0.0.2"]
    assert names["demo-head-1"] == ["10.0.0.2"]
    assert names["demo-workers-1.default.svc"] == ["10.0.0.3", "10.0.0.4"]
    assert not any(name.startswith("demo-predictor") for name in names)  # ClusterIP: not in hosts


def test_a_second_groups_pods_get_hosts_of_their_own() -> None:
    first, second = _reconciled(), _reconciled()
    hosts = [pod.host for pod in cluster._schedule([first, second], node_gpus=0)]
    assert hosts == ["head", "w1", "w2", "g1-head", "g1-w4", "g1-w5"]


def test_the_cluster_plan_survives_a_round_trip_through_its_state_file(
    tmp_path: Path,
) -> None:
    spec = _pod_spec(
        ports=[{"name": "status", "containerPort": 8081}],
        readinessProbe={"httpGet": {"path": "/ready", "port": 8081}},
    )
    pod = plan_pod(_identity(tmp_path), spec, [], {})
    plan = ClusterPlan(
        prefix="mnl",
        subnet="10.230.9.0/24",
        release="r",
        namespace="serving",
        isvc="demo",
        pods=[pod],
        forward=Forward(
            host="127.0.0.1",
            port=8000,
            service="demo-predictor",
            role="head",
            target_port=8080,
        ),
        services={"a": ["10.0.0.2"]},
    )
    state = ClusterState("mnl", root=tmp_path)
    state.write_plan(plan)
    loaded = state.load_plan()
    assert loaded == plan
    assert isinstance(loaded.pods[0], PodPlan)
    assert loaded.url == "http://127.0.0.1:8000/v1"


def test_a_dead_or_zombie_process_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    deadline_polls = 0
    while process_alive(child.pid) and deadline_polls < 200:  # exits at once; a zombie until reaped
        deadline_polls += 1
        os.sched_yield()
        subprocess.run(["sleep", "0.01"], check=True)
    assert not process_alive(child.pid)
    child.wait()
    assert process_alive(os.getpid())


def test_no_kubelet_pid_means_no_cluster(tmp_path: Path) -> None:
    state = ClusterState("mnl", root=tmp_path)
    assert state.kubelet_pid() is None
    state.directory.mkdir(parents=True)
    state.pid_file.write_text("999999999")
    assert state.kubelet_pid() is None


def test_a_claim_the_pods_user_cannot_read_is_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    model = tmp_path / "claim" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    weights = model / "model.safetensors"
    weights.write_bytes(b"")
    weights.chmod(0o600)
    spec = {
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
        "volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "models"}}],
        **_pod_spec(volumeMounts=[{"name": "m", "mountPath": "/mnt/models", "subPath": "tiny"}]),
    }
    with pytest.raises(
        UserError,
        match=r"model.safetensors \(mode 600, .*not readable by uid 1000.*chmod -R a\+rX",
    ):
        plan_pod(_identity(tmp_path), spec, [], {"models": tmp_path / "claim"})
    weights.chmod(0o644)
    assert (
        plan_pod(_identity(tmp_path), spec, [], {"models": tmp_path / "claim"}).containers[0].uid
        == 1000
    )


def test_make_readable_opens_owner_only_files_and_folders_to_every_user(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    weights = folder / "sub" / "model.safetensors"
    weights.write_bytes(b"w")
    weights.chmod(0o600)  # as safetensors writes it
    (folder / "sub").chmod(0o700)
    script = folder / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o700)
    make_readable(folder)
    assert weights.stat().st_mode & 0o777 == 0o644
    assert (folder / "sub").stat().st_mode & 0o777 == 0o755
    assert script.stat().st_mode & 0o777 == 0o744  # read for all, execute kept for its owner
