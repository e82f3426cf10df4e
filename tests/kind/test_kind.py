"""The chart on a real cluster with KServe: installed with its CI values (``ci/kind-values.yaml``),
KServe's controller makes the head and worker pods, they form the group and serve (the same
assertions as the local cluster's e2e suite), and a deleted worker pod heals with no manual step."""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_testing import serving_checks as checks
from multinode_llm_testing.waits import wait_seconds
from pytest_helm_charts.clusters import Cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "multinode-llm"
CI_VALUES = CHART / "ci" / "kind-values.yaml"
RELEASE = "ci"
MODEL_HOST_PATH = "/var/lib/multinode-llm-ci/tiny-model"
READY_S = 1200
RECOVERY_S = 900


@dataclass
class KindRelease:
    """The installed chart as the tests see it."""

    cluster: Cluster
    namespace: str
    isvc: str
    model: str
    base_url: str

    def pods(self, role: str) -> list[dict[str, Any]]:
        app = f"isvc.{self.isvc}-predictor" + ("-worker" if role == "worker" else "")
        found: list[dict[str, Any]] = self.cluster.kubectl(
            f"get pods -l app={app}", namespace=self.namespace
        )
        return [p for p in found if not p["metadata"].get("deletionTimestamp")]

    def ready(self, role: str) -> bool:
        pods = self.pods(role)
        return bool(pods) and all(_condition(p, "Ready") for p in pods)

    def restarts(self, role: str) -> int:
        return sum(
            s.get("restartCount", 0)
            for p in self.pods(role)
            for s in p["status"].get("containerStatuses", [])
        )

    def exec_head(self, argv: list[str]) -> str:
        pod = self.pods("head")[0]["metadata"]["name"]
        command = [
            "kubectl",
            "--kubeconfig",
            self.cluster.kube_config_path or "",
            "-n",
            self.namespace,
        ]
        command += ["exec", pod, "-c", "kserve-container", "--", *argv]
        return subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=180
        ).stdout


def _condition(pod: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> float:
    return wait_seconds(condition, timeout, what, interval=5)


def _stage_model(cluster: Cluster, namespace: str, image: str, claim: str) -> None:
    """The tiny model on every node (a DaemonSet writes it to a hostPath) behind a static
    ReadWriteMany PersistentVolume: each pod reads its own node's identical copy."""
    stage = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "stage-tiny-model", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "stage-tiny-model"}},
            "template": {
                "metadata": {"labels": {"app": "stage-tiny-model"}},
                "spec": {
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "stage",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": [
                                "sh",
                                "-c",
                                "multinode-llm-local make-model /models/model && sleep infinity",
                            ],
                            "readinessProbe": {
                                "exec": {"command": ["test", "-f", "/models/model/config.json"]}
                            },
                            "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "models",
                            "hostPath": {"path": MODEL_HOST_PATH, "type": "DirectoryOrCreate"},
                        }
                    ],
                },
            },
        },
    }
    volume: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{claim}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": MODEL_HOST_PATH},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume["metadata"]["name"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    cluster.kubectl("apply", std_input=yaml.safe_dump_all([stage, volume, pvc]), output_format="")
    cluster.kubectl(
        "rollout status daemonset/stage-tiny-model",
        namespace=namespace,
        timeout="600s",
        output_format="",
    )


@pytest.fixture(scope="module")
def release(kube_cluster: Cluster) -> Iterator[KindRelease]:
    values = yaml.safe_load(CI_VALUES.read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = f"{values.get('image', {}).get('repository', 'ghcr.io/multinode-llm/multinode-llm')}:"
    image += str(values.get("image", {}).get("tag") or chart["appVersion"])
    claim, _, _ = str(values["model"]["uri"]).removeprefix("pvc://").partition("/")
    namespace = f"mnl-kind-{secrets.token_hex(3)}"
    cluster = kube_cluster
    cluster.kubectl(f"create namespace {namespace}", output_format="")
    forward: subprocess.Popen[str] | None = None
    try:
        _stage_model(cluster, namespace, image, claim)
        helm = [
            str(ROOT / ".tools" / "bin" / "helm"),
            "--kubeconfig",
            cluster.kube_config_path or "",
        ]
        subprocess.run(
            [*helm, "install", RELEASE, str(CHART), "-n", namespace, "-f", str(CI_VALUES)],
            check=True,
            timeout=300,
        )
        isvc = cluster.kubectl("get inferenceservices", namespace=namespace)[0]["metadata"]["name"]
        started = time.monotonic()
        model = str(values["model"]["name"])
        kind = KindRelease(
            cluster=cluster, namespace=namespace, isvc=isvc, model=model, base_url=""
        )
        _wait(lambda: kind.ready("head") and kind.ready("worker"), READY_S, "head and worker Ready")
        print(f"kind timing: install -> group Ready: {time.monotonic() - started:.1f} s")
        kubectl = ["kubectl", "--kubeconfig", cluster.kube_config_path or "", "-n", namespace]
        service = f"svc/{isvc}-predictor"
        forward = subprocess.Popen(
            [*kubectl, "port-forward", service, "0:80"], stdout=subprocess.PIPE, text=True
        )
        assert forward.stdout is not None
        match = re.search(r"127\.0\.0\.1:(\d+)", forward.stdout.readline())
        assert match, "kubectl port-forward printed no local port"
        kind.base_url = f"http://127.0.0.1:{match.group(1)}"
        yield kind
    finally:
        if forward is not None:
            forward.terminate()
        helm = [
            str(ROOT / ".tools" / "bin" / "helm"),
            "--kubeconfig",
            cluster.kube_config_path or "",
        ]
        subprocess.run([*helm, "uninstall", RELEASE, "-n", namespace], check=False, timeout=300)
        cluster.kubectl(f"delete namespace {namespace} --wait=true", output_format="")
        cluster.kubectl(
            f"delete persistentvolume {namespace}-{claim} --ignore-not-found", output_format=""
        )


def test_kserve_made_one_head_and_pipeline_minus_one_workers(release: KindRelease) -> None:
    values = yaml.safe_load(CI_VALUES.read_text())
    assert len(release.pods("head")) == 1
    assert len(release.pods("worker")) == int(values["parallelism"]["pipeline"]) - 1


def test_models_lists_the_served_model(release: KindRelease) -> None:
    checks.check_models(release)


def test_completions(release: KindRelease) -> None:
    checks.check_completion(release)


def test_chat_streams_token_by_token(release: KindRelease) -> None:
    checks.check_streaming_chat(release)


def test_metrics_carry_vllm_and_the_supervisor(release: KindRelease) -> None:
    checks.check_metrics(release)


def test_kserve_v2_endpoints_answer(release: KindRelease) -> None:
    checks.check_v2(release)


def test_ray_shows_one_node_per_pod_with_its_gpus(release: KindRelease) -> None:
    values = yaml.safe_load(CI_VALUES.read_text())
    nodes = checks.parse_ray_nodes(release.exec_head(["python", "-c", checks.RAY_NODES_SCRIPT]))
    pod_ips = [p["status"]["podIP"] for role in ("head", "worker") for p in release.pods(role)]
    checks.check_ray(nodes, pod_ips, tensor=int(values["parallelism"]["tensor"]))


def test_a_deleted_worker_pod_heals_the_group(release: KindRelease) -> None:
    head_restarts = release.restarts("head")
    worker = release.pods("worker")[0]["metadata"]["name"]
    release.cluster.kubectl(
        f"delete pod {worker} --grace-period=0 --force",
        namespace=release.namespace,
        output_format="",
    )
    started = time.monotonic()
    _wait(
        lambda: release.restarts("head") > head_restarts,
        RECOVERY_S,
        "the head to restart (liveness)",
    )
    _wait(
        lambda: release.ready("head") and release.ready("worker"),
        RECOVERY_S,
        "the group Ready again",
    )
    print(f"kind timing: deleted worker -> group Ready: {time.monotonic() - started:.1f} s")
