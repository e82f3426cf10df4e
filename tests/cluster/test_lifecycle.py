"""A release's life with real Helm 3 and 4 on real KServe: install, an upgrade that reaches no pod,
one that restarts the group, a rollback, uninstall and reinstall, and the same release name in two
namespaces at once. Each step waits as the README says (``--wait --wait-for-jobs``; Helm 4
``--wait=legacy``) and must finish within its timeout.

The release of each Helm major lives in its own namespace; the tests run in file order, each step
for Helm 3 and then Helm 4, so from the second install on both groups are up at once. What each
step must do is what docs/upgrades.md says of it (its matrix rows ``runtime.labels`` and
``head.env``). tests/lifecycle's Helm model (``helm_model.Helm`` on its fake API server) takes the
same steps with the same renders beside the real ones, and after each it must agree with real Helm
on the release's history and on the objects Helm manages: the model is checked against the real
tools here, where its own suite can only check it against their source. It runs on the chart's
default KServe release, or on those of ``KSERVE_RELEASES`` (``realcluster.releases_to_run``). Not
in the default tox list (about 17 minutes a release): ``tox -e cluster-lifecycle``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from helm_oracle import Modelled, agree
from multinode_llm_local.kserve import releases
from realcluster import (
    CHART,
    WAIT,
    Clusters,
    Installed,
    Obj,
    RealCluster,
    chart_args,
    helm_history,
    install,
    keeps_removed,
    record,
    releases_to_run,
    remake_deployments,
    serving_lock,
    set_flags,
    supported_or_skip,
    wait_for,
)

HELMS = (3, 4)
RELEASE = "llm"
CLAIM = "models"
TIMEOUT = "15m"


def namespace(helm: int) -> str:
    return f"life-helm{helm}"


@pytest.fixture(scope="module", params=releases_to_run())
def cluster(
    request: pytest.FixtureRequest, clusters: Clusters, tiny_model: Path
) -> Iterator[RealCluster]:
    release = supported_or_skip(str(request.param), "no release of the chart installs")
    running = clusters.get(release.version)
    for helm in HELMS:
        running.model_claim(namespace(helm), CLAIM, tiny_model)
    with serving_lock():
        yield running
    for helm in HELMS:
        running.kubectl("delete", "namespace", namespace(helm), "--wait=false")


@pytest.fixture(scope="module")
def releases_(cluster: RealCluster) -> dict[int, Installed]:
    """The installed release of each Helm major, as the steps leave it (on ``cluster``'s KServe
    release: each release starts afresh)."""
    return {}


@pytest.fixture(scope="module")
def first_jobs(cluster: RealCluster) -> dict[int, set[str]]:
    """The readiness Jobs of each Helm major's first revision."""
    return {}


@pytest.fixture(scope="module")
def models(cluster: RealCluster) -> dict[int, Modelled]:
    return {helm: Modelled(helm, namespace(helm), RELEASE) for helm in HELMS}


def rendered(model: Modelled, cluster: RealCluster, sets: Sequence[str] = ()) -> list[Obj]:
    """The chart as the step installs it, with every value the real step was given."""
    return model.rendered(cluster, CHART, chart_args(cluster.kserve, set_flags(sets)))


def installed(releases_: dict[int, Installed], helm: int) -> Installed:
    if helm not in releases_:
        pytest.skip(f"helm{helm}'s release was not installed (an earlier step failed)")
    return releases_[helm]


def generation(group: Installed) -> int:
    isvc = group.cluster.get("-n", group.namespace, f"inferenceservice/{group.isvc}")
    return int(isvc["metadata"]["generation"])


def pod_uids(group: Installed) -> set[str]:
    return {p["metadata"]["uid"] for role in ("head", "worker") for p in group.pods(role)}


def head_env(group: Installed) -> dict[str, str]:
    container = group.pod("head")["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def readiness_jobs(group: Installed) -> dict[str, Obj]:
    jobs = group.cluster.items("jobs", "-n", group.namespace)
    return {
        j["metadata"]["name"]: j
        for j in jobs
        if "-ready-" in j["metadata"]["name"] and not j["metadata"].get("deletionTimestamp")
    }


def history(cluster: RealCluster, helm: int) -> list[str]:
    """``helm history`` of Helm ``helm``'s release: each revision's status, oldest first."""
    return helm_history(cluster, RELEASE, namespace(helm), helm)


def timed(group: Installed, helm: int, what: str, started: float) -> None:
    record(f"KServe {group.cluster.kserve}", f"helm{helm} {what}", time.monotonic() - started)


@pytest.mark.parametrize("helm", HELMS)
def test_install_waits_for_a_serving_group(
    cluster: RealCluster,
    releases_: dict[int, Installed],
    first_jobs: dict[int, set[str]],
    models: dict[int, Modelled],
    helm: int,
) -> None:
    group = install(cluster, RELEASE, namespace(helm), helm=helm, timeout=TIMEOUT)
    releases_[helm] = group
    first_jobs[helm] = set(readiness_jobs(group))
    assert group.serves()
    assert generation(group) == 1
    assert all(j["status"].get("succeeded") == 1 for j in readiness_jobs(group).values())
    assert history(group.cluster, helm) == ["deployed"]
    docs = rendered(models[helm], cluster)
    models[helm].step(lambda client: client.install(RELEASE, namespace(helm), docs))
    agree(models[helm], cluster)


def test_one_release_name_in_two_namespaces_serves_twice(
    releases_: dict[int, Installed],
) -> None:
    """Nothing of the two releases is shared: each namespace has its own runtime, group and
    Services, and both answer at once."""
    groups = [installed(releases_, helm) for helm in HELMS]
    assert all(group.serves() for group in groups)
    runtimes = [
        {r["metadata"]["name"] for r in g.cluster.items("servingruntimes", "-n", g.namespace)}
        for g in groups
    ]
    assert all(len(names) == 1 for names in runtimes), runtimes
    assert groups[0].base_url != groups[1].base_url


@pytest.mark.parametrize("helm", HELMS)
def test_an_upgrade_that_reaches_no_pod_rolls_nothing(
    releases_: dict[int, Installed], models: dict[int, Modelled], helm: int
) -> None:
    """docs/upgrades.md, row ``runtime.labels``: the generation stays 1, no pod is replaced or
    restarted, and the wait ends at once (the readiness Job is the same one, complete)."""
    group = installed(releases_, helm)
    pods, restarts, jobs = pod_uids(group), group.restarts("head"), set(readiness_jobs(group))
    started = time.monotonic()
    group.upgrade("runtime.labels.team=llm", helm=helm, timeout=TIMEOUT)
    timed(group, helm, "upgrade reaching no pod (runtime.labels)", started)
    assert generation(group) == 1
    assert pod_uids(group) == pods
    assert group.restarts("head") == restarts
    assert set(readiness_jobs(group)) == jobs
    assert history(group.cluster, helm) == ["superseded", "deployed"]
    upgraded(models[helm], group)


@pytest.mark.parametrize("helm", HELMS)
def test_an_upgrade_that_reaches_the_pods_rolls_the_group_once(
    releases_: dict[int, Installed], models: dict[int, Modelled], helm: int
) -> None:
    """docs/upgrades.md, row ``head.env``: generation 1 -> 2, the head rolled once, new headless
    Services ``-head-2`` beside the old ones, a new readiness Job that completed."""
    group = installed(releases_, helm)
    heads, jobs = set(group.replica_sets("head")), set(readiness_jobs(group))
    started = time.monotonic()
    group.upgrade("head.env[0].name=TZ", "head.env[0].value=UTC", helm=helm, timeout=TIMEOUT)
    timed(group, helm, "upgrade restarting the group (head.env)", started)
    assert generation(group) == 2
    rolled = set(group.replica_sets("head")) - heads
    assert len(rolled) == 1, f"the head rolled {len(rolled)} times: {sorted(rolled)}"
    assert head_env(group)["TZ"] == "UTC"
    services = {s["metadata"]["name"] for s in group.cluster.items("svc", "-n", group.namespace)}
    assert f"{group.isvc}-head-2" in services, sorted(services)
    if not releases.get(group.cluster.kserve).controller.head_service_cleanup:
        # 0.15.x and 0.16.0 keep only the 3 newest head Services of the whole cluster
        # (cleanHeadSvc, reconcilers/service/service_reconciler.go at v0.15.0, v0.15.2 and
        # v0.16.0; kserve-releases.yaml's headServiceCleanup): with two groups the
        # first's generation-1 Service may be gone.
        assert f"{group.isvc}-head-1" in services, sorted(services)
    now = readiness_jobs(group)
    assert now, "no readiness Job after the upgrade"
    assert not set(now) & jobs, (sorted(jobs), sorted(now))
    assert all(j["status"].get("succeeded") == 1 for j in now.values())
    assert group.serves()
    upgraded(models[helm], group)


@pytest.mark.parametrize("helm", HELMS)
def test_a_rollback_restores_the_first_revision_and_waits_for_it(
    releases_: dict[int, Installed],
    first_jobs: dict[int, set[str]],
    models: dict[int, Modelled],
    helm: int,
) -> None:
    """``helm rollback RELEASE 1``: the first revision's runtime and readiness Job come back (both
    named after the spec's hash), the group restarts once more (generation 3) without the
    upgrade's env, and the wait covers the Job."""
    group = installed(releases_, helm)
    started = time.monotonic()
    group.cluster.helm("rollback", group.release, "1", "--namespace", group.namespace,
                       *WAIT[helm], "--wait-for-jobs", "--timeout", TIMEOUT,
                       version=helm)  # fmt: skip
    timed(group, helm, "rollback to revision 1", started)
    group.sets = []
    assert generation(group) == 3
    if keeps_removed(group.cluster.kserve):
        # 0.15.0 patches the Deployment with the whole desired one: the removed variable stays.
        assert head_env(group)["TZ"] == "UTC"
    else:
        assert "TZ" not in head_env(group)
    assert set(readiness_jobs(group)) == first_jobs[helm]
    assert all(j["status"].get("succeeded") == 1 for j in readiness_jobs(group).values())
    assert history(group.cluster, helm) == ["superseded", "superseded", "superseded", "deployed"]
    assert group.serves()
    models[helm].step(lambda client: client.rollback(RELEASE, namespace(helm), 1))
    agree(models[helm], group.cluster)


@pytest.mark.parametrize("helm", HELMS)
def test_new_deployments_drop_what_a_release_that_keeps_it_kept(
    releases_: dict[int, Installed], helm: int
) -> None:
    """On a release that keeps what an update removes (0.15.0), the way out docs/upgrades.md
    gives: delete the two Deployments; KServe makes them again from the InferenceService, and the
    head comes back without the variable the rollback removed, and serves."""
    group = installed(releases_, helm)
    if not keeps_removed(group.cluster.kserve):
        pytest.skip(f"KServe {group.cluster.kserve} removes what an update removes (test above)")
    started = time.monotonic()
    remake_deployments(group.cluster, group.namespace, group.isvc)
    wait_for(
        lambda: group.ready("head") and group.ready("worker") and group.serves(),
        900,
        "the group made again by KServe to serve",
    )
    timed(group, helm, "Deployments deleted, made again, serving", started)
    assert "TZ" not in head_env(group)
    assert generation(group) == 3


@pytest.mark.parametrize("helm", HELMS)
def test_uninstall_removes_the_group_and_keeps_the_model_claim(
    releases_: dict[int, Installed], models: dict[int, Modelled], helm: int
) -> None:
    group = installed(releases_, helm)
    claim = group.cluster.get("-n", group.namespace, f"pvc/{CLAIM}")["metadata"]["uid"]
    started = time.monotonic()
    group.cluster.helm("uninstall", group.release, "--namespace", group.namespace,
                       *WAIT[helm], "--timeout", "5m", version=helm)  # fmt: skip
    timed(group, helm, "uninstall", started)
    ns = group.namespace
    for kind in ("inferenceservices", "servingruntimes", "jobs"):
        assert group.cluster.items(kind, "-n", ns) == [], kind
    wait_for(lambda: not group.cluster.items("pods", "-n", ns), 180,
             "the garbage collector to remove the group's pods")  # fmt: skip
    assert group.cluster.get("-n", ns, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    models[helm].step(lambda client: client.uninstall(RELEASE, ns))
    agree(models[helm], group.cluster, released=False)


@pytest.mark.parametrize("helm", HELMS)
def test_a_reinstall_serves_again_from_the_kept_claim(
    cluster: RealCluster,
    releases_: dict[int, Installed],
    models: dict[int, Modelled],
    helm: int,
) -> None:
    """The same name again: a new InferenceService (generation 1) on the claim the first one left,
    whose model is untouched."""
    old = installed(releases_, helm)
    claim = cluster.get("-n", old.namespace, f"pvc/{CLAIM}")["metadata"]["uid"]
    group = install(cluster, RELEASE, namespace(helm), helm=helm, timeout=TIMEOUT)
    releases_[helm] = group
    assert generation(group) == 1
    assert cluster.get("-n", group.namespace, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    assert group.serves()
    docs = rendered(models[helm], cluster)
    models[helm].step(lambda client: client.install(RELEASE, namespace(helm), docs))
    agree(models[helm], cluster)


def upgraded(model: Modelled, group: Installed) -> None:
    """The model's upgrade with every value the real one was given, then the comparison."""
    docs = rendered(model, group.cluster, group.sets)
    model.step(lambda client: client.upgrade(RELEASE, namespace(model.helm), docs))
    agree(model, group.cluster)
