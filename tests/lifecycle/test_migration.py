"""A release of the old chart moving to the new one, and a failed download run again: the paths a
user must take, and what they leave behind.

- Helm: the old claim was a hook, and Helm stamps no hook with its ownership annotations, so the
  upgrade to a chart whose manifest holds the claim is refused by existingResourceConflict unless
  ``--take-ownership`` (Helm 3.17 and later) adopts it. The old hook Job stays behind: no
  manifest names it, and only a hook event of its own would delete it.
- Argo CD: a sync applies the new, ordinary claim over the old hook one (no ownership check), and
  never prunes the old hook Job (a live hook is no prune task).
- A download Job that failed is an ordinary Job now: a sync or an upgrade with the same values
  leaves it failed (its name, a hash of its spec, is unchanged); deleting it runs it again. The
  old chart's hook Job ran again on every sync and upgrade.
"""

from __future__ import annotations

import pytest

from tests.lifecycle.argo_model import ArgoCD
from tests.lifecycle.charts import MODEL, render
from tests.lifecycle.cluster import FakeCluster, Key
from tests.lifecycle.helm_model import Helm, HelmError
from tests.lifecycle.test_model_volume import CLAIM, NS, download_jobs, is_download

OLD_JOB = "llm-multinode-llm-download"


def test_helm_upgrades_an_old_release_with_take_ownership(major: str) -> None:
    cluster = FakeCluster()
    helm = Helm(cluster, major)
    helm.install("llm", NS, render(major, "old"))
    cluster.settle()
    first = cluster.get(CLAIM)
    assert first is not None

    new = render(major, "new")
    with pytest.raises(HelmError) as refused:
        helm.upgrade("llm", NS, new)
    assert (
        f'PersistentVolumeClaim "{CLAIM.name}" in namespace "{NS}" exists and cannot be imported '
        "into the current release"
    ) in str(refused.value)
    assert 'missing key "meta.helm.sh/release-name"' in str(refused.value)

    helm.upgrade("llm", NS, new, take_ownership=True)
    cluster.settle()
    assert cluster.get(CLAIM) is first
    assert cluster.downloads == [(CLAIM.name, MODEL)]
    assert OLD_JOB in download_jobs(cluster)  # left behind: delete it by hand


def test_argo_cd_syncs_an_old_app_onto_the_new_chart(major: str) -> None:
    cluster = FakeCluster()
    argo = ArgoCD(cluster)
    assert argo.sync("llm", NS, render(major, "old")).phase == "Succeeded"
    first = cluster.get(CLAIM)
    assert first is not None

    op = argo.sync("llm", NS, render(major, "new"), prune=True)
    assert op.phase == "Succeeded", op.message
    assert cluster.get(CLAIM) is first
    assert "argocd.argoproj.io/hook" not in first.annotations
    assert cluster.downloads == [(CLAIM.name, MODEL)]
    assert OLD_JOB in download_jobs(cluster)  # a live hook is never pruned: delete it by hand


@pytest.mark.parametrize("tool", ["helm", "argo-cd"])
def test_a_failed_download_runs_again_once_its_job_is_deleted(major: str, tool: str) -> None:
    """The same values leave the failed Job failed; ``kubectl delete job`` and the next upgrade or
    sync create it again."""
    cluster = FakeCluster(job_fails=is_download)
    docs = render(major, "new")
    helm, argo = Helm(cluster, major), ArgoCD(cluster)

    def deploy(first: bool) -> None:
        if tool == "argo-cd":
            argo.sync("llm", NS, docs)
        elif first:
            helm.install("llm", NS, docs)
        else:
            helm.upgrade("llm", NS, docs)
        cluster.settle()

    deploy(first=True)
    [job] = download_jobs(cluster)
    key = Key("batch", "Job", NS, job)
    failed = cluster.get(key)
    assert failed is not None
    cluster.job_fails = lambda _: False  # the cause is fixed (a token, the Hub)
    deploy(first=False)
    assert cluster.get(key) is failed  # the same failed Job, not run again
    assert cluster.downloads == []

    cluster.delete(key)
    deploy(first=False)
    assert cluster.downloads == [(CLAIM.name, MODEL)]
