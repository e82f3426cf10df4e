"""Every other KServe release built here (``local/go/kserve-v*``): the README's install on it
serves a PP=2 group, real KServe made what the emulation of that release says (for the install and
for every change of docs/upgrades.md's matrix), and a release the chart refuses does what the
refusal says it would.

A release whose module the Go proxy does not serve is listed in ``local/go/unserved.yaml``: its
test skips with the proxy's answer (the emulation still covers it in ``tox -e unit`` and ``chart``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oracle
import pytest
import yaml
from multinode_llm_local import kserve
from multinode_llm_local.controlplane import kserve as real_kserve
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from multinode_llm_testing.chartlib import hack_script
from realcluster import (
    CHART,
    LOCAL_VALUES,
    TOOLS,
    Clusters,
    Installed,
    RealCluster,
    events,
    install,
    render_pending,
    serving_lock,
    supported_or_skip,
    wait_for,
)

NAMESPACE = "rel"
# Every release of the chart's table but its default (tests/cluster/test_install.py runs that).
OTHERS = [v for v in releases.versions() if v != releases.default().version]


def _built(version: str) -> pytest.MarkDecorator | None:
    refused = real_kserve.unserved().get(version)
    if refused is None:
        return None
    return pytest.mark.skip(
        reason=f"KServe {version} runs emulated only: the Go module proxy refused "
        f"github.com/kserve/kserve@v{version} ({refused.splitlines()[0]})"
    )


def _param(version: str) -> object:
    mark = _built(version)
    return pytest.param(version, marks=[mark] if mark else [], id=version)


@pytest.fixture(params=[_param(v) for v in OTHERS], scope="module")
def cluster(
    request: pytest.FixtureRequest, clusters: Clusters, tiny_model: Path
) -> Iterator[RealCluster]:
    running = clusters.get(str(request.param))
    running.model_claim(NAMESPACE, "models", tiny_model)
    yield running
    running.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def test_the_readme_install_serves_a_pp2_group_and_matches_the_emulation(
    cluster: RealCluster,
) -> None:
    release = supported_or_skip(cluster.kserve, "the next test checks the refusal")
    with serving_lock():
        group = install(cluster, "rel", NAMESPACE)
        checks.check_models(group)
        checks.check_streaming_chat(group)
        assert oracle.differences(group, group.manifest()) == []
        _the_supervisors_derive_what_the_release_does_not_inject(group, release)
        _a_second_release_waits_for_gpus(cluster, group, release)
        cluster.helm("uninstall", group.release, "--namespace", NAMESPACE, "--wait")


def _the_supervisors_derive_what_the_release_does_not_inject(
    group: Installed, release: releases.Release
) -> None:
    """0.15.0 injects no node or GPU count: the head and the workers derive them."""
    if "RAY_NODE_COUNT" not in release.controller.head_env:
        assert "derived RAY_NODE_COUNT=2 from PIPELINE_PARALLEL_SIZE" in group.log("head")
    if "REQUEST_GPU_COUNT" not in release.controller.worker_env:
        assert "derived REQUEST_GPU_COUNT=1 from TENSOR_PARALLEL_SIZE" in group.log("worker")


def _a_second_release_waits_for_gpus(
    cluster: RealCluster, group: Installed, release: releases.Release
) -> None:
    """A second release beside the first: its runtime passes the same webhooks, and its pods,
    2 GPUs each where each node has 1 left, stay Pending, the real scheduler saying why; the
    first keeps serving, and on a release whose readiness works it stays Ready."""
    cluster.helm(
        "install", "second", str(CHART), "--namespace", NAMESPACE, "-f", str(LOCAL_VALUES),
        "--set", f"kserve.version={cluster.kserve}", "--set", "parallelism.tensor=2",
        "--set", "readiness.enabled=false",
    )  # fmt: skip
    second = Installed(cluster, "second", NAMESPACE, "second-multinode-llm")
    wait_for(lambda: len(second.pods("head") + second.pods("worker")) == 2, 120, "its 2 pods")
    for role in ("head", "worker"):
        pod = second.pod(role)
        name = pod["metadata"]["name"]
        wait_for(
            lambda name=name: any(
                "Insufficient nvidia.com/gpu" in e for e in events(cluster, NAMESPACE, name)
            ),
            120,
            f"the scheduler to say why {name} waits",
        )
        assert pod["status"]["phase"] == "Pending"
    assert group.serves()
    if release.controller.readiness == "available":
        isvc = cluster.get("-n", NAMESPACE, f"inferenceservice/{group.isvc}")
        conditions = {c["type"]: c["status"] for c in isvc["status"]["conditions"]}
        assert conditions["Ready"] == "True", conditions
    cluster.helm("uninstall", "second", "--namespace", NAMESPACE, "--wait")


def test_every_upgrade_row_is_what_this_release_emulated_does(cluster: RealCluster) -> None:
    """docs/upgrades.md's changes on this release (its kserve.version set): real helm 4 and this
    release's own manager make what its emulation makes, row by row
    (tests/cluster/test_upgrade_matrix.py says how; it runs the default release)."""
    release = supported_or_skip(cluster.kserve, "no row installs")
    matrix = hack_script("upgrade-matrix")
    # The rows the chart refuses on this release (group.executor=mp before 0.18.0) have none.
    changes = matrix.accepted_changes(cluster.kserve)
    cluster.install_prometheus_operator_crds()
    cluster.install_gateway_api()
    try:
        real = matrix.measure_all_live(matrix.Live(cluster.kubeconfig), changes=changes)
    finally:
        cluster.uninstall_gateway_api()
        cluster.uninstall_prometheus_operator_crds()
    emulated = matrix.measure_all(release=cluster.kserve, changes=changes)
    assert matrix.unwaited(real) == []  # each row's --wait --wait-for-jobs waits for its restart
    if release.controller.head_service_cleanup:
        # cleanHeadSvc keeps the 3 newest head Services of the whole cluster (reconcilers/service/
        # service_reconciler.go at v0.15.0, v0.15.2 and v0.16.0):
        # which of a row's survive depends on every other row's, not on the row.
        real, emulated = ([without_services(o) for o in outcomes] for outcomes in (real, emulated))
    assert matrix.disagreements(real, emulated) == []


def without_services(outcome: Any) -> Any:
    """``outcome`` with its Services columns emptied."""
    return dataclasses.replace(outcome, new_services=[], gone_services=[])


def test_a_refused_release_does_what_the_refusal_says(cluster: RealCluster) -> None:
    """0.20.0 is refused because its controller deletes the workers of a multi-node
    InferenceService (kserve-releases.yaml, deletesWorkers): the chart rendered for the newest
    supported release, applied to it, loses its worker Deployment as the emulation says."""
    release = releases.get(cluster.kserve)
    if release.status == "supported":
        pytest.skip(f"the chart supports KServe {cluster.kserve}: the test above")
    refusal = subprocess.run(
        [str(TOOLS / "helm4"), "template", "x", str(CHART), "--set", "model.uri=pvc://m/x",
         "--set", f"kserve.version={cluster.kserve}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refusal.returncode != 0
    assert "kserve.version" in refusal.stderr
    if not release.controller.deletes_workers:
        pytest.skip(f"KServe {cluster.kserve} is refused for another reason: {refusal.stderr}")
    supported = releases.versions("supported")[-1]
    objects = render_pending("gone", NAMESPACE, supported)
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", "-",
                    stdin=yaml.safe_dump_all(objects))  # fmt: skip
    group = Installed(cluster, "gone", NAMESPACE, "gone-multinode-llm")
    emulated = {w.role for w in _emulation(objects, release).workloads}
    assert emulated == {"head"}
    _wait_for_deployments(group, expected={f"{group.isvc}-predictor"})


def _emulation(objects: list[dict[str, object]], release: releases.Release) -> kserve.Reconciled:
    return kserve.reconcile(json.loads(json.dumps(objects)), NAMESPACE, 1, release)


def _wait_for_deployments(group: Installed, expected: set[str]) -> None:
    """Until KServe has reconciled the InferenceService (it reports PredictorReady) and its
    Deployments are exactly ``expected``."""

    def settled() -> bool:
        isvc = group.cluster.get("-n", NAMESPACE, f"inferenceservice/{group.isvc}")
        kinds = {c["type"] for c in (isvc.get("status") or {}).get("conditions") or []}
        names = {d["metadata"]["name"] for d in group.cluster.items("deployments", "-n", NAMESPACE)}
        return "PredictorReady" in kinds and names == expected

    wait_for(settled, 120, f"the Deployments of {group.isvc} to be exactly {sorted(expected)}")


def test_install_refuses_a_cluster_that_would_copy_the_model_into_every_pod(
    cluster: RealCluster,
) -> None:
    """KServe 0.15.x with ``storageInitializer.enableDirectPvcVolumeMount: false`` copies a
    ``pvc://`` model into an emptyDir of each pod (storage_initializer_injector.go at v0.15.2);
    ``helm install`` reads the cluster's setting (lookup) and refuses, naming it. ``helm template``
    cannot see the cluster and renders."""
    if not cluster.kserve.startswith("0.15."):
        pytest.skip(f"KServe {cluster.kserve} always mounts the claim itself")
    config = cluster.get("-n", "kserve", "configmap/inferenceservice-config")
    storage = json.loads(config["data"]["storageInitializer"])
    assert storage.get("enableDirectPvcVolumeMount") is True  # KServe's chart's default
    copying = {
        "data": {"storageInitializer": json.dumps({**storage, "enableDirectPvcVolumeMount": False})}
    }
    cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                    "--type", "merge", "-p", json.dumps(copying))  # fmt: skip
    try:
        version = f"kserve.version={cluster.kserve}"
        refused = cluster.helm(
            "install", "copy", str(CHART), "--namespace", NAMESPACE, "--dry-run=server",
            "--set", "model.uri=pvc://models/tiny-llama", "--set", version, check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert "enableDirectPvcVolumeMount=false" in refused.stderr
    finally:
        restore = {"data": {"storageInitializer": json.dumps(storage)}}
        cluster.kubectl("-n", "kserve", "patch", "configmap", "inferenceservice-config",
                        "--type", "merge", "-p", json.dumps(restore))  # fmt: skip
