"""KServe's own llmisvc controller on the real control plane: an LLMInferenceService of tensor x
pipeline parallelism with a ``worker``, over the chart's preset, serves as a group of this runtime.

The controller is KServe's ``cmd/llmisvc`` at each release built here (``local/go/llmisvc-vX.Y.Z``;
every test runs once per release), installed from KServe's own charts with its webhooks
(``multinode-llm-local cluster llmisvc``), beside the KServe manager of the same release and the
real LeaderWorkerSet controller. No Gateway API runs: the service has no ``spec.router`` and is
reached through KServe's workload Service. Without the chart's preset KServe stops such a service
(``ConfigNotFound``, or ``CombineBaseError`` before 0.19.0: kserve-releases.yaml's
``missingConfig``; docs/llmisvc.md); with it, its controller makes a LeaderWorkerSet of the
runtime's head and worker, and the group answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_llm_local.controlplane import cluster as real
from multinode_llm_local.controlplane import llmisvc as controller
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from realcluster import (
    HEAL_S,
    MODEL,
    PREFIX,
    Clusters,
    Endpoint,
    Obj,
    RealCluster,
    condition,
    helm_chart,
    record,
    serving_lock,
    wait_for,
)

NAMESPACE = "llmisvc"
SERVICE = "tiny"
# the name KServe looks up (pkg/controller/<api>/llmisvc/config_merge.go, v0.16.0 to v0.20.0)
PRESET = "kserve-config-llm-worker-pipeline-parallel"
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
GPU = {"nvidia.com/gpu": "1"}


def service(release: str, namespace: str = NAMESPACE) -> Obj:
    """TP 1 x PP 2 of the tiny model on the claim: a head and one worker, one mocked GPU each, in
    the release's API (v1alpha1 at 0.16.0)."""
    return {
        "apiVersion": releases.llm_inference_service(release).api_version,
        "kind": "LLMInferenceService",
        "metadata": {"name": SERVICE, "namespace": namespace},
        "spec": {
            "model": {"uri": f"pvc://models/{MODEL}", "name": MODEL},
            "parallelism": {"tensor": 1, "pipeline": 2},
            "template": {"containers": [{"name": "main", "resources": {"limits": GPU}}]},
            "worker": {"containers": [{"name": "main", "resources": {"limits": GPU}}]},
        },
    }


@pytest.fixture(scope="module", params=controller.built_versions())
def release(request: pytest.FixtureRequest) -> str:
    """Each KServe release whose llmisvc controller is built here (local/go/llmisvc-v*)."""
    return str(request.param)


@pytest.fixture(scope="module")
def cluster(clusters: Clusters, tiny_model: Path, release: str) -> Iterator[RealCluster]:
    running = clusters.get(release)
    ours = not running.has_crd(LWS_CRD)
    if ours:
        real.leader_worker_set(PREFIX)
    real.llm_inference_service(PREFIX)
    running.model_claim(NAMESPACE, "models", tiny_model)
    # The chart's preset alone (model.uri empty), as docs/llmisvc.md installs it.
    helm_chart(running, "install", "presets", NAMESPACE,
               ["llmInferenceServicePresets.enabled=true", "model.uri="])  # fmt: skip
    yield running
    # The service's finalizer is the controller's: the service goes before the controller does.
    running.kubectl("delete", "llminferenceservices", "--all", "-n", NAMESPACE, "--wait",
                    timeout=180)  # fmt: skip
    running.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    real.llm_inference_service(PREFIX, remove=True)
    if ours:
        real.leader_worker_set(PREFIX, remove=True)
        # test_lws.py asks a cluster without the kind first: gone, not going
        wait_for(lambda: not running.has_crd(LWS_CRD), 180, "the LeaderWorkerSet CRD removed")


def test_kserves_webhook_admits_the_preset_and_refuses_a_broken_one(
    cluster: RealCluster, release: str
) -> None:
    """KServe validates a preset by executing its template on a sample service (the controller's
    validating webhook: ``validateLLMISVCConfig`` in ``cmd/llmisvc/main.go``, v0.17.0 to v0.20.0;
    ``pkg/controller/v1alpha1/llmisvc/validation/config_validator.go`` at v0.16.0): the chart's
    went through it; one naming a field KServe lacks does not."""
    api = releases.llm_inference_service(release).api_version
    preset = cluster.get("-n", NAMESPACE, f"llminferenceserviceconfig/{PRESET}")
    assert preset["apiVersion"] == api
    broken = {
        "apiVersion": api,
        "kind": "LLMInferenceServiceConfig",
        "metadata": {"name": "broken", "namespace": NAMESPACE},
        "spec": {"template": {"containers": [
            {"name": "main", "args": ["{{ .Spec.NoSuchField }}"]},
        ]}},
    }  # fmt: skip
    with pytest.raises(AssertionError, match="webhook"):
        cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(broken))


def test_without_the_preset_kserve_stops_the_service(cluster: RealCluster, release: str) -> None:
    """KServe looks for the preset in the service's namespace, then in its own: in a namespace
    without the chart's, the same service gets no group (docs/llmisvc.md)."""
    bare = f"{NAMESPACE}-bare"
    cluster.kubectl("create", "namespace", bare)
    try:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(service(release, bare)))

        def presets(status: str) -> Obj | None:
            found = cluster.get("-n", bare, f"llminferenceservice/{SERVICE}")
            conditions = (found.get("status") or {}).get("conditions") or []
            return next(
                (c for c in conditions if c["type"] == "PresetsCombined" and c["status"] == status),
                None,
            )

        wait_for(lambda: presets("False"), 60, "KServe's verdict on the service's presets")
        verdict = presets("False")
        assert verdict is not None
        assert verdict["reason"] == releases.llm_inference_service(release).missing_config, verdict
        assert PRESET in verdict["message"], verdict
        assert not cluster.items("leaderworkersets", "-n", bare)
    finally:
        cluster.kubectl("delete", "llminferenceservices", "--all", "-n", bare, "--wait",
                        timeout=180)  # fmt: skip
        cluster.kubectl("delete", "namespace", bare, "--wait=false")


@pytest.fixture(scope="module")
def served(cluster: RealCluster, release: str) -> Iterator[Endpoint]:
    """The service applied, once it answers a completion through KServe's workload Service."""
    with serving_lock():
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(service(release)))
        took = wait_for(lambda: _answers(cluster), HEAL_S, "the LLMInferenceService serving")
        record(f"KServe {release} llmisvc", "LLMInferenceService applied -> serves (PP=2)", took)
        yield _workload(cluster)


def _answers(cluster: RealCluster) -> bool:
    """Whether the group answers through KServe's workload Service, once KServe has made it."""
    try:
        workload = _workload(cluster)
    except AssertionError:  # kubectl get: the Service is not there yet
        return False
    return checks.answers(workload)


def _workload(cluster: RealCluster) -> Endpoint:
    """KServe's workload Service over the groups' leaders, on port 8000
    (``pkg/controller/<api>/llmisvc/workload.go``, v0.16.0 to v0.20.0)."""
    ip = cluster.cluster_ip(NAMESPACE, f"{SERVICE}-kserve-workload-svc")
    return Endpoint(f"http://{ip}:8000")


def test_kserve_takes_the_preset_and_makes_a_group_of_this_runtime(
    cluster: RealCluster, served: Endpoint, release: str
) -> None:
    status = cluster.get("-n", NAMESPACE, f"llminferenceservice/{SERVICE}")["status"]
    if releases.llm_inference_service(release).applied_configs:
        # what KServe merged, in its own words: the chart's preset, found in the service's namespace
        assert status["appliedConfigs"] == [
            {"name": PRESET, "namespace": NAMESPACE, "source": "Preset"}
        ], status
    else:
        assert "appliedConfigs" not in status, status
    assert condition({"status": status}, "PresetsCombined")
    # the group's name (pkg/controller/<api>/llmisvc/workload_multi_node.go, v0.16.0 to v0.20.0)
    group = cluster.get("-n", NAMESPACE, f"leaderworkerset/{SERVICE}-kserve-mn")
    template = group["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2  # parallelism.pipeline
    # A head is Ready only once its group has formed: LeaderReady would never start the worker.
    assert group["spec"]["startupPolicy"] == "LeaderCreated"
    # KServe's choice, not the chart's (docs/lws.md heals in place): any restart remakes the group
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert (leader["command"], leader["args"][:2]) == (["multinode-llm"], ["head", "--port"])
    assert (worker["command"], worker["args"]) == (["multinode-llm"], ["worker"])
    checks.check_models(served)


def test_the_service_becomes_ready(cluster: RealCluster, served: Endpoint, release: str) -> None:
    took = wait_for(
        lambda: condition(cluster.get("-n", NAMESPACE, f"llminferenceservice/{SERVICE}"), "Ready"),
        120,
        "the LLMInferenceService Ready",
    )
    record(f"KServe {release} llmisvc", "serves -> LLMInferenceService Ready", took)
