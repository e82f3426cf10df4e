"""The model volume under a failed sync, a reinstall and an uninstall, under Argo CD's sync and
Helm's release actions, on real renders of the chart before the fix (``old``) and now (``new``).

Each test runs both charts and asserts the old chart's bad outcome and the new chart's good one, so
the assertion that passes on ``new`` is one that fails on ``old``. The cluster side is a fake
(cluster.py); Helm's and Argo CD's behaviour is modelled from their source (helm_model.py,
argo_model.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.lifecycle.argo_model import SYNC_OPTIONS, ArgoCD
from tests.lifecycle.charts import CHARTS, MODEL, component, render, render_result
from tests.lifecycle.cluster import Doc, FakeCluster, Key
from tests.lifecycle.helm_model import Helm, HelmError

NS = "serving"
CLAIM = Key("", "PersistentVolumeClaim", NS, "llm-multinode-llm-model")


def is_download(doc: Doc) -> bool:
    labels = doc.get("metadata", {}).get("labels", {})
    return bool(
        doc["kind"] == "Job" and labels.get("app.kubernetes.io/component") == "model-download"
    )


def is_isvc(doc: Doc) -> str | None:
    return "denied by the webhook" if doc["kind"] == "InferenceService" else None


def size_of(cluster: FakeCluster) -> str:
    live = cluster.get(CLAIM)
    assert live is not None, "no claim"
    size: str = live.doc["spec"]["resources"]["requests"]["storage"]
    return size


def download_jobs(cluster: FakeCluster) -> dict[str, list[Any]]:
    """Name -> arguments of each live download Job."""
    return {
        k.name: v.doc["spec"]["template"]["spec"]["containers"][0]["args"]
        for k, v in cluster.of_kind("Job", NS).items()
        if is_download(v.doc)
    }


# --- Argo CD deletes the model volume when any task of a sync fails ----------------------------


@pytest.mark.parametrize("which", CHARTS)
def test_a_failed_download_leaves_argo_cd_the_volume(major: str, which: str) -> None:
    """old: the claim is a PreSync hook with delete policy HookFailed; it is Bound (Healthy, so
    Succeeded) when the download Job fails, and the failed sync deletes every HookFailed hook."""
    cluster = FakeCluster(job_fails=is_download)
    op = ArgoCD(cluster).sync("llm", NS, render(major, which))
    assert op.phase == "Failed", op.message  # the download did fail, in both charts
    if which == "old":
        assert op.deleted_hooks == [CLAIM]
        assert cluster.get(CLAIM) is None
    else:
        assert op.deleted_hooks == []
        assert cluster.get(CLAIM) is not None


@pytest.mark.parametrize("which", CHARTS)
def test_a_rejected_inferenceservice_leaves_argo_cd_the_volume_and_its_model(
    major: str, which: str
) -> None:
    """A sync that succeeded once staged the model; the next one fails in a later wave (KServe's
    webhook refuses the InferenceService). old: the claim is deleted with the model on it, and the
    sync after the webhook is fixed downloads it again; new: the claim and the model stay."""
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    docs = render(major, which)
    assert argo.sync("llm", NS, docs).phase == "Succeeded"
    first = cluster.get(CLAIM)
    assert first is not None
    assert first.models == {MODEL}

    cluster.reject = is_isvc
    op = argo.sync("llm", NS, docs)
    assert op.phase == "Failed", op.message
    cluster.reject = lambda _: None
    assert argo.sync("llm", NS, docs).phase == "Succeeded"

    after = cluster.get(CLAIM)
    assert after is not None
    if which == "old":
        assert op.deleted_hooks == [CLAIM]
        assert after.uid != first.uid
        assert len(cluster.downloads) == 2, cluster.downloads
    else:
        assert op.deleted_hooks == []
        assert after.uid == first.uid
        assert cluster.downloads == [(CLAIM.name, MODEL)]


# --- a reinstall wipes the kept volume; upgrades never touch it ---------------------------------


@pytest.mark.parametrize("which", CHARTS)
def test_a_reinstall_under_the_same_name_adopts_the_kept_volume(major: str, which: str) -> None:
    """``helm uninstall`` then ``helm install llm``. old: uninstall leaves the hook claim (hooks are
    not in the manifest), and the next pre-install hook of that name, before-hook-creation by
    default, deletes it and creates it empty: the model is downloaded again. new: uninstall keeps
    the claim (resource-policy keep), whose ownership stamp still names release llm in serving, so
    install adopts it (existingResourceConflict) with its data."""
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    docs = render(major, which)
    helm.install("llm", NS, docs)
    cluster.settle()
    first = cluster.get(CLAIM)
    assert first is not None
    assert first.models == {MODEL}

    helm.uninstall("llm", NS)
    assert cluster.get(CLAIM) is first  # both charts keep the claim on uninstall
    helm.install("llm", NS, docs)
    cluster.settle()

    after = cluster.get(CLAIM)
    assert after is not None
    if which == "old":
        assert after.uid != first.uid
        assert cluster.downloads == [(CLAIM.name, MODEL)] * 2
    else:
        assert after is first
        assert cluster.downloads == [(CLAIM.name, MODEL)]


@pytest.mark.parametrize("which", CHARTS)
def test_an_upgrade_applies_a_new_volume_size(major: str, which: str) -> None:
    """old: the claim is a pre-install hook only; ``helm upgrade`` never applies it. new: an
    object of the manifest, patched by the upgrade (the API server allows resources.requests)."""
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    helm.install("llm", NS, render(major, which, {"model": {"storage": {"size": "100Gi"}}}))
    helm.upgrade("llm", NS, render(major, which, {"model": {"storage": {"size": "200Gi"}}}))
    assert size_of(cluster) == ("100Gi" if which == "old" else "200Gi")


@pytest.mark.parametrize("which", CHARTS)
def test_an_upgrade_from_pvc_to_hf_creates_the_volume(major: str, which: str) -> None:
    """Installed with ``pvc://``, upgraded to ``hf://``. old: the pre-upgrade download Job mounts a
    claim nobody creates (its hook is pre-install only): the Job stays pending and the upgrade
    times out. new: the upgrade creates the claim, and the Job stages onto it."""
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    helm.install("llm", NS, render(major, which, {"model": {"uri": "pvc://models/qwen"}}))
    assert cluster.get(CLAIM) is None
    hf = render(major, which)
    if which == "old":
        with pytest.raises(HelmError, match="pre-upgrade hooks failed: timed out") as refused:
            helm.upgrade("llm", NS, hf)
        assert f'persistentvolumeclaim "{CLAIM.name}" not found' in str(refused.value)
        assert cluster.get(CLAIM) is None
    else:
        helm.upgrade("llm", NS, hf)
        cluster.settle()
        live = cluster.get(CLAIM)
        assert live is not None
        assert live.models == {MODEL}
        assert cluster.downloads == [(CLAIM.name, MODEL)]


@pytest.mark.parametrize("which", CHARTS)
def test_a_rollback_brings_back_the_download_job_of_its_revision(major: str, which: str) -> None:
    """Install revision A, upgrade to B, ``helm rollback``. old: the download Job is a
    pre-install/pre-upgrade hook, no rollback hook and no release object: after the rollback the
    Job left is B's. new: the Job is in the manifest, named after its spec: the rollback recreates
    A's Job (found complete on the claim: no download) and deletes B's."""
    rev_a, rev_b = f"{MODEL}:rev-a", f"{MODEL}:rev-b"
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    docs_a = render(major, which, {"model": {"uri": rev_a}})
    helm.install("llm", NS, docs_a)
    cluster.settle()
    helm.upgrade("llm", NS, render(major, which, {"model": {"uri": rev_b}}))
    cluster.settle()
    helm.rollback("llm", NS)
    cluster.settle()

    jobs = download_jobs(cluster)
    assert len(jobs) == 1, jobs
    [(name, args)] = jobs.items()
    if which == "old":
        assert rev_b in args
    else:
        assert rev_a in args
        assert name == component(docs_a, "Job", "model-download")["metadata"]["name"]
    assert cluster.downloads == [(CLAIM.name, rev_a), (CLAIM.name, rev_b)]


# --- the user's choice: keepOnUninstall ----------------------------------------------------------


@pytest.mark.parametrize("keep", [True, False])
def test_uninstall_deletes_the_volume_only_when_asked(major: str, keep: bool) -> None:
    """new: ``model.storage.keepOnUninstall=false`` drops resource-policy keep, so uninstall
    deletes the claim; the default keeps it. (old: see the next test.)"""
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    values = {"model": {"storage": {"keepOnUninstall": keep}}}
    helm.install("llm", NS, render(major, "new", values))
    rel = helm.uninstall("llm", NS)
    assert (cluster.get(CLAIM) is not None) is keep
    assert rel.kept == ([CLAIM] if keep else [])


def test_the_old_chart_cannot_be_asked_to_delete_the_volume(major: str) -> None:
    """old: the value does not exist (the schema refuses it), and uninstall never deletes the
    claim, a hook."""
    refused = render_result(major, "old", {"model": {"storage": {"keepOnUninstall": False}}})
    assert refused.returncode != 0
    assert "keepOnUninstall" in refused.stderr
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    helm.install("llm", NS, render(major, "old"))
    helm.uninstall("llm", NS)
    assert cluster.get(CLAIM) is not None


@pytest.mark.parametrize(
    ("which", "keep"),
    [("old", True), ("new", True), ("new", False)],
    ids=["old", "new", "new-drop"],
)
def test_argo_cd_app_deletion_keeps_the_volume_unless_asked(
    major: str, which: str, keep: bool
) -> None:
    """Deleting the Application with cascade. new: ``Delete=false`` (and resource-policy keep)
    keep the claim; keepOnUninstall=false lets it go with the rest. old: kept too (its
    resource-policy keep, which Argo CD's shouldBeDeleted reads): this is no finding, a guard."""
    values = {} if which == "old" else {"model": {"storage": {"keepOnUninstall": keep}}}
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    assert argo.sync("llm", NS, render(major, which, values)).phase == "Succeeded"
    deleted = argo.delete_app("llm")
    assert (cluster.get(CLAIM) is not None) is keep
    assert (CLAIM in deleted) is not keep
    assert any(k.kind == "InferenceService" for k in deleted)


@pytest.mark.parametrize("keep", [True, False])
def test_argo_cd_prune_keeps_the_volume_unless_asked(major: str, keep: bool) -> None:
    """new: a sync with prune after switching to ``pvc://``: ``Prune=false`` keeps the claim while
    the download Job goes; keepOnUninstall=false prunes it. (old: a live hook is never pruned.)"""
    values = {"model": {"storage": {"keepOnUninstall": keep}}}
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    assert argo.sync("llm", NS, render(major, "new", values)).phase == "Succeeded"
    pvc = {**values, "model": {**values["model"], "uri": "pvc://models/qwen"}}
    op = argo.sync("llm", NS, render(major, "new", pvc), prune=True)
    assert op.phase == "Succeeded", op.message
    assert (cluster.get(CLAIM) is not None) is keep
    assert not download_jobs(cluster)
    assert (CLAIM in op.pruned) is not keep


@pytest.mark.parametrize("prune_last", [True, False], ids=["chart", "without-PruneLast"])
def test_argo_cd_prunes_a_claim_it_may_delete_after_the_group_has_left_it(
    major: str, prune_last: bool
) -> None:
    """new, keepOnUninstall=false, moved to ``pvc://`` and synced with prune: the chart's
    ``PruneLast`` prunes the claim after the InferenceService has moved to the user's claim.
    Without it the claim's prune runs before that update: its wave is swapped with the readiness
    Job's only while that Job's prune is pending, then falls back to -1. A real sync then waits
    for ever for the claim, which the group's pods still mount (tests/cluster/test_argocd.py);
    the fake deletes it at once (argo_model.py's docstring)."""
    values: dict[str, Any] = {"model": {"storage": {"keepOnUninstall": False}}}
    first = render(major, "new", values)
    if not prune_last:
        for doc in first:
            doc["metadata"].get("annotations", {}).pop(SYNC_OPTIONS, None)
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    assert argo.sync("llm", NS, first).phase == "Succeeded"
    cluster.events.clear()
    pvc = {"model": {**values["model"], "uri": "pvc://models/qwen"}}
    op = argo.sync("llm", NS, render(major, "new", pvc), prune=True)
    assert op.phase == "Succeeded", op.message
    assert CLAIM in op.pruned
    isvc = Key("serving.kserve.io", "InferenceService", NS, "llm-multinode-llm")
    claim_pruned = cluster.events.index(("delete", CLAIM))
    isvc_moved = cluster.events.index(("update", isvc))
    assert (claim_pruned > isvc_moved) is prune_last, cluster.events
