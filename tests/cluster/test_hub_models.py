"""An hf:// model on real KServe: the chart's own claim and its download Job, which reach a FAKE
Hugging Face Hub (the real Hub cannot be reached here) served on this machine's end of the
cluster's uplink (``ClusterInfo.root_ip``), the address pods may reach. The fake Hub counts every
blob byte it sends, which is the oracle: the claim outlives an uninstall, a reinstall over it
downloads nothing, and a shrink of the claim is refused before anything changes.

One real cluster and one release serve every test of this module, in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_llm_testing.fake_hub import FakeHub
from realcluster import (
    Clusters,
    Installed,
    RealCluster,
    install,
    record,
    serving_lock,
    start_fake_hub,
    with_namespace,
)

NAMESPACE = "hub-llm"
REPO = "org/tiny-llama"
RELEASE = "hf"
CLAIM = f"{RELEASE}-multinode-llm-model"


@pytest.fixture(scope="module")
def cluster(clusters: Clusters) -> Iterator[RealCluster]:
    with with_namespace(clusters, NAMESPACE) as running:
        yield running


@pytest.fixture(scope="module")
def hub(cluster: RealCluster, tiny_model: Path) -> Iterator[FakeHub]:
    fake = start_fake_hub(cluster, tiny_model, REPO)
    yield fake
    fake.stop()


def model_sets(hub: FakeHub, *more: str) -> tuple[str, ...]:
    """The values of an hf:// release that downloads through the fake Hub."""
    return (
        f"model.uri=hf://{REPO}",
        f"modelCache.endpoint={hub.url}",
        "model.storage.size=1Gi",
        *more,
    )


@pytest.fixture(scope="module")
def group(cluster: RealCluster, hub: FakeHub) -> Iterator[Installed]:
    with serving_lock():
        yield install(cluster, RELEASE, NAMESPACE, *model_sets(hub))


def test_the_download_job_staged_every_file_once_and_the_group_serves(
    group: Installed, hub: FakeHub
) -> None:
    repo = hub.repos[("models", REPO)]
    assert dict(hub.blob_bytes) == {path: len(body) for path, body in repo.files.items()}
    assert group.serves()
    claim = group.cluster.get("pvc", "-n", NAMESPACE, CLAIM)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["status"]["phase"] == "Bound"


def test_a_shrink_of_the_claim_is_refused_before_anything_changes(
    group: Installed, hub: FakeHub
) -> None:
    result = group.upgrade("model.storage.size=512Mi", check=False)
    group.sets = group.sets[:-1]
    assert result.returncode != 0
    assert "model.storage.size=512Mi is smaller than the volume" in result.stderr, result.stderr
    assert "a volume cannot shrink" in result.stderr
    claim = group.cluster.get("pvc", "-n", NAMESPACE, CLAIM)
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert group.serves()


def test_a_new_storage_class_for_the_claim_is_refused(group: Installed) -> None:
    result = group.upgrade("model.storage.storageClassName=other", check=False)
    group.sets = group.sets[:-1]
    assert result.returncode != 0
    assert "a claim's class cannot change" in result.stderr, result.stderr


def test_an_upgrade_that_only_makes_a_new_download_job_waits_for_it_and_rolls_no_pod(
    group: Installed, hub: FakeHub
) -> None:
    """docs/upgrades.md's third class (a new Job, no pod of the group): ``helm upgrade --wait
    --wait-for-jobs`` of ``download.resources`` returns within its timeout once the new download
    Job has completed; the Job finds every file on the claim and downloads nothing."""
    pods = {p["metadata"]["uid"] for role in ("head", "worker") for p in group.pods(role)}
    isvc = group.cluster.get("-n", NAMESPACE, f"inferenceservice/{group.isvc}")
    before, sent = set(group.cluster.download_jobs(NAMESPACE)), hub.blob_bytes.total()
    started = time.monotonic()
    group.upgrade("download.resources.limits.memory=8Gi")
    record(
        f"KServe {group.cluster.kserve}",
        "helm4 upgrade download.resources",
        time.monotonic() - started,
    )
    jobs = group.cluster.download_jobs(NAMESPACE)
    [new] = set(jobs) - before
    assert jobs[new]["status"].get("succeeded") == 1
    assert {p["metadata"]["uid"] for role in ("head", "worker") for p in group.pods(role)} == pods
    again = group.cluster.get("-n", NAMESPACE, f"inferenceservice/{group.isvc}")
    assert again["metadata"]["generation"] == isvc["metadata"]["generation"]
    assert hub.blob_bytes.total() == sent, "the new download Job downloaded again"
    assert group.serves()


def test_uninstall_keeps_the_claim_and_a_reinstall_serves_from_it_downloading_nothing(
    group: Installed, hub: FakeHub
) -> None:
    sent = hub.blob_bytes.total()
    uid = group.cluster.get("pvc", "-n", NAMESPACE, CLAIM)["metadata"]["uid"]
    group.cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    assert group.cluster.items("inferenceservices", "-n", NAMESPACE) == []
    assert group.cluster.get("pvc", "-n", NAMESPACE, CLAIM)["metadata"]["uid"] == uid
    again = install(group.cluster, RELEASE, NAMESPACE, *model_sets(hub))  # the group's lock held
    assert again.serves()
    assert group.cluster.get("pvc", "-n", NAMESPACE, CLAIM)["metadata"]["uid"] == uid
    assert hub.blob_bytes.total() == sent, "the reinstall downloaded again"
