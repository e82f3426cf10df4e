"""A release of the chart before the lifecycle fixes (``tests/lifecycle/charts.py``, OLD_COMMIT)
moved to today's chart with real Helm 3 and 4 on real KServe, as the README tells a user to:
``helm upgrade --take-ownership``.

The old chart made the model's claim a pre-install hook, which Helm never stamps as the release's,
and staged an ``hf://`` model with KServe's storage-initializer image into
``models/ORG/NAME/REVISION/``. Its download Job runs here on a FAKE of that image (no image can be
pulled here): the cluster's KServe release's own storage code (``provide_storage_initializer``),
against a FAKE Hub whose byte counts are the oracle, as in test_hub_models.py. The old group's pods
are pinned to a node label nobody has: they stay Pending and start no vLLM, since only the claim
and the Job matter before the move.

Only on a KServe release whose storage initializer makes its target's parents (0.19.0 on): on the
older ones the old chart's download fails (tests/storage/test_nested_target.py; seen here on
0.16.0), so no old release exists to move. For each Helm major: the upgrade to today's chart is
refused, naming the claim, until ``--take-ownership``; then the claim (same uid) is the release's,
the new download Job links the old files into the snapshot layout without downloading a byte, the
old hook Job stays (delete it by hand), and the group serves. tests/lifecycle's Helm model takes the
same steps with the same renders and must agree (helm_oracle.py). In ``tox -e cluster-lifecycle``
(opt-in), on the chart's default KServe release or on those of ``KSERVE_RELEASES``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helm_oracle import Modelled, agree
from multinode_llm_testing.fake_hub import FakeHub
from realcluster import (
    CHART,
    WAIT,
    Clusters,
    Installed,
    Obj,
    RealCluster,
    chart_args,
    provide_storage_initializer,
    record,
    releases_to_run,
    serving_lock,
    set_flags,
    start_fake_hub,
    supported_or_skip,
)

from tests.lifecycle.charts import chart_dir
from tests.lifecycle.helm_model import RELEASE_NAME, HelmError

HELMS = (3, 4)
REPO = "org/tiny-llama"
TIMEOUT = "15m"
PENDING = '{"multinode-llm.local/none":"pending"}'  # a node label nobody has


def namespace(helm: int) -> str:
    return f"mig-helm{helm}"


def release(helm: int) -> str:
    return f"mig{helm}"


@pytest.fixture(scope="module", params=releases_to_run())
def cluster(request: pytest.FixtureRequest, clusters: Clusters) -> Iterator[RealCluster]:
    release = supported_or_skip(str(request.param), "no release of today's chart installs")
    if not release.storage_initializer.makes_parents:
        # Found on 0.16.0 (6 Dec 2026): the old chart's download Job failed, BackoffLimitExceeded.
        pytest.skip(
            f"no old release to move on KServe {release.version}: its storage initializer makes "
            "its target with one os.mkdir (defect storage-initializer-mkdir), so the old chart's "
            "download into models/ORG/NAME/REVISION fails and its install never completes"
        )
    running = clusters.get(release.version)
    for helm in HELMS:
        running.kubectl("create", "namespace", namespace(helm))
    yield running
    for helm in HELMS:
        running.kubectl("delete", "namespace", namespace(helm), "--wait=false")


@pytest.fixture(scope="module")
def hub(cluster: RealCluster, tiny_model: Path) -> Iterator[FakeHub]:
    fake = start_fake_hub(cluster, tiny_model, REPO)
    provide_storage_initializer(cluster, f"docker.io/kserve/storage-initializer:v{cluster.kserve}")
    yield fake
    fake.stop()


@dataclass
class Migration:
    """One Helm major's release, moved step by step, with the Helm model beside it."""

    cluster: RealCluster
    hub: FakeHub
    model_files: dict[str, int]  # the model's files: path -> size
    helm: int
    ns: str = field(init=False)
    release: str = field(init=False)
    claim: str = field(init=False)
    model: Modelled = field(init=False)

    def __post_init__(self) -> None:
        self.ns, self.release = namespace(self.helm), release(self.helm)
        self.claim = f"{self.release}-multinode-llm-model"
        self.model = Modelled(self.helm, self.ns, self.release)

    @property
    def old_job(self) -> str:
        return f"{self.release}-multinode-llm-download"

    def sets(self) -> list[str]:
        """What both charts are given: an hf:// model through the fake Hub."""
        return [f"model.uri=hf://{REPO}", f"modelCache.endpoint={self.hub.url}",
                "model.storage.size=1Gi"]  # fmt: skip

    def old_args(self) -> list[str]:
        """The old chart's values: the model, this cluster's KServe, the group held Pending, and
        its runtime in the namespace: its default, a ClusterServingRuntime at priority 2 for
        ``huggingface``, is refused by KServe's webhook beside the built-in
        kserve-huggingfaceserver-multinode ("same priority assigned for the model format",
        servingruntime_webhook.go, v0.19.0), so no old release on this KServe has it."""
        old_only = [f"kserve.version={self.cluster.kserve}", "runtime.scope=Namespace"]
        return [
            *set_flags([*self.sets(), *old_only]),
            *("--set-json", f"head.nodeSelector={PENDING}"),
            *("--set-json", f"worker.nodeSelector={PENDING}"),
        ]

    def new_args(self) -> list[str]:
        return chart_args(self.cluster.kserve, set_flags(self.sets()))

    def helm_run(
        self, verb: str, chart: Path, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        result = self.cluster.helm(verb, self.release, str(chart), "--namespace", self.ns,
                                   *args, "--timeout", TIMEOUT, version=self.helm,
                                   check=check)  # fmt: skip
        what = f"helm{self.helm} {verb} {' '.join(a for a in args if a.startswith('--take'))}"
        record(f"KServe {self.cluster.kserve}", what.strip(), time.monotonic() - started)
        return result

    def claim_meta(self) -> Obj:
        found: Obj = self.cluster.get("-n", self.ns, f"pvc/{self.claim}")["metadata"]
        return found

    def files(self, layout: str) -> dict[str, int]:
        """The model's files in a folder of the claim's model (``main``: the old chart's
        revision folder; ``snapshots``: today's one snapshot): path -> inode."""
        folder = self.cluster.claim_folder(self.ns, self.claim) / "models" / REPO / layout
        if layout == "snapshots":
            [folder] = folder.iterdir()
        return {
            str(p.relative_to(folder)): p.stat().st_ino
            for p in folder.rglob("*")
            if p.is_file() and not {".cache", ".multinode-llm"} & set(p.relative_to(folder).parts)
        }

    def install_old(self) -> None:
        """The old chart's install: its hook claim, unstamped, and the model in the old layout,
        downloaded once."""
        sent = self.hub.blob_bytes.total()
        self.helm_run("install", chart_dir("old"), *self.old_args())
        claim = self.claim_meta()
        assert claim["annotations"]["helm.sh/hook"] == "pre-install"
        assert RELEASE_NAME not in claim["annotations"]  # Helm stamps no hook
        assert sorted(self.files("main")) == sorted(self.model_files)
        assert self.hub.blob_bytes.total() - sent == sum(self.model_files.values())
        assert self.cluster.download_jobs(self.ns)[self.old_job]["status"].get("succeeded") == 1
        docs = self.model.rendered(self.cluster, chart_dir("old"), self.old_args())
        self.model.step(lambda client: client.install(self.release, self.ns, docs))
        agree(self.model, self.cluster)

    def upgrade_refused(self) -> None:
        """Today's chart without ``--take-ownership``: refused, naming the claim, in both."""
        refused = self.helm_run("upgrade", CHART, *self.new_args(), check=False)
        assert refused.returncode != 0
        conflict = (
            f'PersistentVolumeClaim "{self.claim}" in namespace "{self.ns}" exists and cannot be '
            "imported into the current release"
        )
        assert conflict in refused.stderr, refused.stderr
        assert 'missing key "meta.helm.sh/release-name"' in refused.stderr
        docs = self.model.rendered(self.cluster, CHART, self.new_args())
        with pytest.raises(HelmError) as modelled:
            self.model.step(lambda client: client.upgrade(self.release, self.ns, docs))
        assert conflict in str(modelled.value)
        agree(self.model, self.cluster)

    def take_ownership(self) -> None:
        """The README's move: the same claim, now the release's; the old files linked into
        today's layout, no byte downloaded; the old hook Job left; the group serves."""
        uid, sent = self.claim_meta()["uid"], self.hub.blob_bytes.total()
        self.helm_run("upgrade", CHART, *self.new_args(), "--take-ownership", *WAIT[self.helm],
                      "--wait-for-jobs")  # fmt: skip
        claim = self.claim_meta()
        assert claim["uid"] == uid
        assert claim["annotations"][RELEASE_NAME] == self.release
        assert self.hub.blob_bytes.total() == sent, "the new download Job downloaded again"
        assert self.files("snapshots") == self.files("main"), "not hard links of the old files"
        jobs = self.cluster.download_jobs(self.ns)
        assert self.old_job in jobs  # left behind: the README says to delete it by hand
        assert all(j["status"].get("succeeded") == 1 for j in jobs.values())
        group = Installed(self.cluster, self.release, self.ns, f"{self.release}-multinode-llm")
        assert group.serves()
        docs = self.model.rendered(self.cluster, CHART, self.new_args())
        self.model.step(lambda c: c.upgrade(self.release, self.ns, docs, take_ownership=True))
        agree(self.model, self.cluster)


@pytest.mark.parametrize("helm", HELMS)
def test_an_old_release_moves_to_this_chart_with_take_ownership(
    cluster: RealCluster, hub: FakeHub, tiny_model: Path, helm: int
) -> None:
    sizes = {str(p.relative_to(tiny_model)): p.stat().st_size
             for p in tiny_model.rglob("*") if p.is_file()}  # fmt: skip
    migration = Migration(cluster, hub, sizes, helm)
    migration.install_old()
    migration.upgrade_refused()
    with serving_lock():  # the group's vLLM, from the upgrade's wait to the uninstall
        migration.take_ownership()
        cluster.helm("uninstall", migration.release, "--namespace", migration.ns,
                     *WAIT[helm], "--timeout", "5m", version=helm)  # fmt: skip
