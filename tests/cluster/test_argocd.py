"""The chart synced by real Argo CD: its application controller and repo server, built from
``github.com/argoproj/argo-cd/v3`` (``local/go/argocd``), with Debian's Redis, on the real control
plane and KServe (``multinode_llm_local.controlplane.argocd``). The chart comes from a git
repository on this machine (a ``file://`` URL, as Argo CD's own end-to-end tests use), its values
from the Application (``helm.valuesObject``), and the model from an hf:// URI through a FAKE
Hugging Face Hub (the real Hub cannot be reached), whose byte counts say what was downloaded.

One Application, one release, in order: a sync, wave by wave; the chart's InferenceService health
check (installed in argocd-cm, as docs/kserve-releases.md says) as the group forms, serves, loses
a member and heals; no diff after the sync; a head that cannot start (Degraded: the sync fails in
wave 0); a download that fails (the sync fails in wave -1); a switch to a claim of the user's; the
app's deletion. The model volume outlives each failure and the deletion; an app made again with
``keepOnUninstall: false`` adopts it and its deletion takes it; one that lets its claim go and
moves to a claim of the user's prunes it. tests/lifecycle's Argo CD model
(argo_model.py) takes the same steps where it can (it has no InferenceService health) and must
agree with real Argo CD on what each applied, pruned and deleted.

It runs on the chart's default KServe release, or on those of ``KSERVE_RELEASES``
(``realcluster.releases_to_run``; ``tox -e cluster-argocd-releases``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_local.controlplane import argocd
from multinode_llm_local.controlplane import cluster as real
from multinode_llm_testing.fake_hub import FakeHub
from realcluster import (
    CHART,
    LOCAL_VALUES,
    PREFIX,
    Clusters,
    Installed,
    RealCluster,
    keeps_removed,
    provide_storage_initializer,
    record,
    releases_to_run,
    remake_deployments,
    serving_lock,
    start_fake_hub,
    supported_or_skip,
    wait_for,
)

from tests.lifecycle.argo_model import ArgoCD
from tests.lifecycle.charts import chart_dir, render
from tests.lifecycle.cluster import Doc, FakeCluster, Key

NAMESPACE = "argo-llm"
APP = "llm"
REPO = "org/tiny-llama"
CLAIM = f"{APP}-multinode-llm-model"
ISVC = f"{APP}-multinode-llm"
SYNC_S = 900
Obj = dict[str, Any]


def component(obj: Obj) -> str:
    return str(obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""))


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass
class Application:
    """The Argo CD Application of the release, driven as ``argocd app`` drives one: a sync is an
    ``operation`` on the object, which the controller runs and clears."""

    cluster: RealCluster
    values: Obj
    name: str = APP
    namespace: str = NAMESPACE  # where the release goes

    @property
    def ref(self) -> str:
        return f"applications.argoproj.io/{self.name}"

    def get(self) -> Obj:
        return self.cluster.get("-n", argocd.NAMESPACE, self.ref)

    def manifest(self, repo: Path) -> Obj:
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {
                "name": self.name,
                "namespace": argocd.NAMESPACE,
                # `argocd app delete` cascades through this finalizer.
                "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            },
            "spec": {
                "project": "default",
                "source": {
                    "repoURL": f"file://{repo}",
                    "targetRevision": "HEAD",
                    "path": "charts/multinode-llm",
                    "helm": {"releaseName": self.name, "valuesObject": self.values},
                },
                "destination": {
                    "server": "https://kubernetes.default.svc",
                    "namespace": self.namespace,
                },
            },
        }

    def create(self, repo: Path) -> None:
        """The Application, its chart from ``repo``."""
        self.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(self.manifest(repo)))

    def set_values(self, values: Obj) -> None:
        """Replace the Application's values (a JSON patch: a merge patch would keep old keys)."""
        self.values = values
        patch = [{"op": "replace", "path": "/spec/source/helm/valuesObject", "value": values}]
        self.cluster.kubectl("-n", argocd.NAMESPACE, "patch", self.ref,
                             "--type", "json", "-p", json.dumps(patch))  # fmt: skip

    def refresh(self) -> Obj:
        """A hard refresh (manifests rendered again, the diff computed again), then the app once
        the controller has taken it (it removes the annotation)."""
        self.cluster.kubectl("-n", argocd.NAMESPACE, "annotate", self.ref,
                             "argocd.argoproj.io/refresh=hard", "--overwrite")  # fmt: skip
        wait_for(
            lambda: (
                "argocd.argoproj.io/refresh" not in self.get()["metadata"].get("annotations", {})
            ),
            120,
            "Argo CD's hard refresh of the app",
        )
        return self.get()

    def sync(self, timeout: float = SYNC_S) -> Obj:
        """Run one sync (prune on, as `argocd app sync --prune`); the finished operation state.

        As `argocd app sync` does (SetAppOperation, util/argo/argo.go, v3.5.1), the operation is
        set and the last one's state cleared in one write: the controller merge-patches a new
        operation's state over the stored one, so a kept ``syncResult`` would lend the new sync
        its source, whose values the patch merges (a key the new values dropped stays), and a
        kept ``retryCount`` its retries."""
        return self.finish_sync(self.start_sync(), timeout)

    def start_sync(self) -> str | None:
        """Set a sync operation (as ``sync`` says); the last operation's start, which
        ``finish_sync`` tells this one from."""
        app = self.get()
        assert "operation" not in app, "another operation is in progress"
        sync: Obj = {"prune": True, "syncStrategy": {"hook": {}}}
        operation: Obj = {"initiatedBy": {"username": "tests"}, "sync": sync}
        before: str | None = (app.get("status") or {}).get("operationState", {}).get("startedAt")
        patch = json.dumps({"operation": operation, "status": {"operationState": None}})
        self.cluster.kubectl("-n", argocd.NAMESPACE, "patch", self.ref,
                             "--type", "merge", "-p", patch)  # fmt: skip
        return before

    def finish_sync(self, before: str | None, timeout: float = SYNC_S) -> Obj:
        """The operation ``start_sync`` set, once it has finished."""

        def finished() -> bool:
            app = self.get()
            state = (app.get("status") or {}).get("operationState") or {}
            return (
                "operation" not in app
                and state.get("startedAt") != before
                and state.get("phase") in ("Succeeded", "Failed", "Error")
            )

        wait_for(finished, timeout, "Argo CD's sync operation to finish")
        state: Obj = self.get()["status"]["operationState"]
        return state

    def delete(self) -> None:
        """``argocd app delete``: the Application goes once its finalizer has deleted what it
        tracks and may delete."""
        self.cluster.kubectl("-n", argocd.NAMESPACE, "delete", self.ref, "--ignore-not-found",
                             "--timeout=300s", timeout=330)  # fmt: skip

    def tracked(self) -> set[tuple[str, str]]:
        """What the app tracks and still exists (kind, name): its status can still list an
        object an earlier sync pruned and the garbage collector has since removed."""
        listed = {(r["kind"], r["name"]) for r in self.refresh()["status"]["resources"]}
        return present(self.cluster, listed, self.namespace)

    def isvc_health(self) -> str:
        """The InferenceService's health as Argo CD records it (the chart's check)."""
        for resource in (self.get().get("status") or {}).get("resources") or []:
            if resource.get("kind") == "InferenceService":
                return str((resource.get("health") or {}).get("status", ""))
        return ""


class HealthWatch:
    """Every change of the InferenceService's health in the Application's status, sampled each
    second in a thread while the block runs (``seen``: the statuses in order, repeats dropped)."""

    def __init__(self, app: Application) -> None:
        self.app = app
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # the state the block ended in

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def _sample(self) -> None:
        try:
            health = self.app.isvc_health()
        except AssertionError:  # kubectl failed once: the next sample will tell
            return
        if health and (not self.seen or self.seen[-1] != health):
            self.seen.append(health)


@pytest.fixture(scope="module", params=releases_to_run())
def cluster(request: pytest.FixtureRequest, clusters: Clusters) -> Iterator[RealCluster]:
    # A refused release named in KSERVE_RELEASES is skipped before a cluster starts.
    release = supported_or_skip(str(request.param), "no sync renders")
    running = clusters.get(release.version)
    running.kubectl("create", "namespace", NAMESPACE)
    print(real.argo_cd(PREFIX))
    yield running
    running.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture(scope="module")
def hub(cluster: RealCluster, tiny_model: Path) -> Iterator[FakeHub]:
    fake = start_fake_hub(cluster, tiny_model, REPO)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gitops_repo(CHART, tmp_path_factory.mktemp("gitops") / "repo")


def gitops_repo(chart: Path, folder: Path) -> Path:
    """A git repository holding ``chart``, as a GitOps repository holds it."""
    shutil.copytree(chart, folder / "charts" / "multinode-llm")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "chart"]):
        subprocess.run(["git", *argv], cwd=folder, env={**env, "PATH": "/usr/bin:/bin"},
                       check=True)  # fmt: skip
    folder.parent.chmod(0o755)
    return folder


def app_values(cluster: RealCluster, hub: FakeHub, **more: Any) -> Obj:
    """The README's local values for the tiny model, as an hf:// model through the fake Hub."""
    values: Obj = yaml.safe_load(LOCAL_VALUES.read_text())
    values["model"] = {
        "uri": f"hf://{REPO}",
        "name": "tiny-llama",
        "storage": {"size": "1Gi"},
    }
    values["modelCache"] = {"endpoint": hub.url}
    values["kserve"] = {"version": cluster.kserve}
    for key, value in more.items():
        values[key] = {**values.get(key, {}), **value}
    return values


def on_users_claim(cluster: RealCluster, values: Obj, tiny_model: Path) -> Obj:
    """``values`` with the model moved to the README's claim of the user's (its ``pvc://`` URI),
    that claim made if missing and holding the tiny model."""
    cluster.model_claim(NAMESPACE, "models", tiny_model)
    local = yaml.safe_load(LOCAL_VALUES.read_text())["model"]
    return {**values, "model": {**values["model"], "uri": local["uri"]}}


@pytest.fixture(scope="module")
def app(cluster: RealCluster, hub: FakeHub, repo: Path) -> Iterator[Application]:
    application = Application(cluster, app_values(cluster, hub))
    application.create(repo)
    with serving_lock():
        yield application
    cluster.kubectl("-n", argocd.NAMESPACE, "delete", "applications.argoproj.io", APP,
                    "--ignore-not-found", "--wait=false")  # fmt: skip


@pytest.fixture(scope="module")
def first_sync(app: Application) -> tuple[Obj, list[str]]:
    """The first sync of the release, timed, with the health the app recorded during it."""
    started = time.monotonic()
    with HealthWatch(app) as watch:
        state = app.sync()
        if state["phase"] == "Succeeded":
            wait_for(lambda: app.isvc_health() == "Healthy", 120, "the app to record Healthy")
    record(f"KServe {app.cluster.kserve}", "Argo CD sync (install, PP=2 Ray)",
           time.monotonic() - started)  # fmt: skip
    return state, watch.seen


def group(app: Application) -> Installed:
    return Installed(app.cluster, APP, NAMESPACE, ISVC)


def created(cluster: RealCluster, kind: str, name: str) -> datetime:
    meta = cluster.get("-n", NAMESPACE, f"{kind}/{name}")["metadata"]
    return parse_time(meta["creationTimestamp"])


def sync_a_move_of_the_group(app: Application, timeout: float = SYNC_S) -> Obj:
    """A sync that moves the group from hf:// to a claim of the user's, finished.

    On a release that keeps what an update removes from a Deployment (0.15.0), the head keeps the
    hf:// model's ``MODEL_REVISION`` and looks for a Hub snapshot on the user's claim, so the sync
    waits in wave 0 for a group that cannot serve. The test then takes the way out
    docs/upgrades.md gives, as a user would while the sync waits: it deletes the two Deployments
    once the InferenceService has its new spec, and KServe makes them again from it."""
    if not keeps_removed(app.cluster.kserve):
        return app.sync(timeout)

    def generation() -> int:
        isvc = app.cluster.get("-n", NAMESPACE, f"inferenceservice/{ISVC}")
        return int(isvc["metadata"]["generation"])

    applied = generation()
    before = app.start_sync()
    wait_for(lambda: generation() > applied, SYNC_S, "the InferenceService's new spec applied")
    remake_deployments(app.cluster, NAMESPACE, ISVC)
    return app.finish_sync(before, timeout)


def test_a_sync_applies_the_chart_wave_by_wave_and_the_group_serves(
    app: Application, first_sync: tuple[Obj, list[str]], hub: FakeHub
) -> None:
    """Argo CD applies a wave only once the one before is healthy: the InferenceService (wave 0)
    after the download Job (wave -1) completed, the readiness Job (wave 1) after the head was
    Ready (the chart's health check calls the InferenceService Healthy only then)."""
    state, _ = first_sync
    assert state["phase"] == "Succeeded", state.get("message")
    cluster = app.cluster
    jobs = cluster.items("jobs", "-n", NAMESPACE)
    [download] = [j for j in jobs if component(j) == "model-download"]
    [ready_job] = [j for j in jobs if component(j) == "readiness"]
    downloaded = parse_time(download["status"]["completionTime"])
    assert created(cluster, "inferenceservice", ISVC) >= downloaded
    [head] = group(app).pods("head")
    head_ready = next(c for c in head["status"]["conditions"] if c["type"] == "Ready")
    assert parse_time(ready_job["metadata"]["creationTimestamp"]) >= parse_time(
        head_ready["lastTransitionTime"]
    )
    assert group(app).serves()
    repo = hub.repos[("models", REPO)]
    assert dict(hub.blob_bytes) == {path: len(body) for path, body in repo.files.items()}
    model = ArgoCD(FakeCluster())
    operation = model.sync(APP, NAMESPACE, rendered(app.values), prune=True)
    assert operation.phase == state["phase"]
    assert names({key for key, _ in operation.results}) == real_results(state, "Synced")


def test_the_shipped_health_check_saw_the_group_progress_then_serve(
    app: Application, first_sync: tuple[Obj, list[str]]
) -> None:
    _, seen = first_sync
    assert seen[-1] == "Healthy", seen
    assert "Progressing" in seen, seen
    assert "Degraded" not in seen, seen
    # The app's own health waits for the readiness Job too (wave 1, applied last, running on).
    wait_for(lambda: app.get()["status"]["health"]["status"] == "Healthy", 300, "the app Healthy")


def test_a_synced_release_shows_no_diff(
    app: Application, first_sync: tuple[Obj, list[str]]
) -> None:
    """After a hard refresh, every object the chart renders is Synced: nothing KServe's webhooks
    or controllers write into them reads as drift."""
    found = app.refresh()
    drift = [
        f"{r['kind']}/{r['name']}"
        for r in found["status"].get("resources") or []
        if r.get("status") != "Synced"
    ]
    assert drift == [], drift
    assert found["status"]["sync"]["status"] == "Synced"


def test_a_lost_member_reads_progressing_until_the_group_heals_then_healthy(
    app: Application, first_sync: tuple[Obj, list[str]]
) -> None:
    """A killed worker takes the group out (the head exits and both restart in place): the
    check calls it Progressing, never Degraded (which would fail a sync running then), and
    Healthy again once it serves, though KServe 0.16-0.19 then write another reason than at
    install (the Deployments' conditions reordered)."""
    installed = group(app)
    with HealthWatch(app) as watch:
        took = installed.heals_after_killing("worker")
        wait_for(lambda: app.isvc_health() == "Healthy", 120, "the app to record Healthy again")
    record(f"KServe {app.cluster.kserve}", "Argo CD: killed worker -> Healthy", took)
    assert "Progressing" in watch.seen, watch.seen
    assert "Degraded" not in watch.seen, watch.seen
    assert watch.seen[-1] == "Healthy", watch.seen
    assert app.get()["status"]["health"]["status"] == "Healthy"


def test_a_head_that_cannot_start_is_degraded_and_fails_the_sync_keeping_the_claim(
    app: Application, first_sync: tuple[Obj, list[str]]
) -> None:
    """A revision whose engine refuses its arguments: the head crash-loops, KServe reports its
    model FailedToLoad, the chart's check calls that Degraded, and the sync fails in wave 0
    with the claim as it was; the revision after it serves again."""
    claim = app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"]
    good = app.values
    args = [*good["vllm"]["args"], "--no-such-engine-flag"]
    app.set_values({**good, "vllm": {**good["vllm"], "args": args}})
    state = app.sync(timeout=420)
    assert state["phase"] == "Failed", state.get("message")
    # The operation failed on the InferenceService's health: the check's Degraded, with its
    # message (a crash loop comes and goes between restarts; the sync saw it when it was there).
    [isvc] = [r for r in state["syncResult"]["resources"] if r["kind"] == "InferenceService"]
    assert isvc["status"] == "Synced", isvc
    assert "FailedToLoad" in isvc.get("message", ""), isvc
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    # While the crash-looping pods go, KServe may still report their FailedToLoad, which fails
    # a sync: synced again, as docs/kserve-releases.md tells Argo CD users.
    app.set_values(good)
    attempts = [app.sync()]
    while attempts[-1]["phase"] != "Succeeded" and len(attempts) < 4:
        attempts.append(app.sync())
    assert attempts[-1]["phase"] == "Succeeded", [outcome(each) for each in attempts]
    assert group(app).serves()


def test_a_failed_sync_keeps_the_model_claim_and_its_model(
    app: Application, first_sync: tuple[Obj, list[str]], hub: FakeHub
) -> None:
    """A revision whose download fails (a repo the Hub does not have, no retry): the sync fails
    at wave -1 and leaves the claim, with the model on it, as it was; the next good sync serves
    from it without downloading again."""
    claim = app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"]
    sent = hub.blob_bytes.total()
    good = app.values
    model = modelled(good)
    missing = {**good["model"], "uri": "hf://org/missing"}
    failing = {**good, "model": missing, "download": {"backoffLimit": 0}}
    app.set_values(failing)
    state = app.sync()
    assert state["phase"] == "Failed", state.get("message")
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    model.cluster.job_fails = is_download
    operation = model.sync(APP, NAMESPACE, rendered(failing), prune=True)
    model.cluster.job_fails = lambda _: False
    assert operation.phase == "Failed"
    assert operation.deleted_hooks == []
    # What was made last goes first: the readiness Job (wave 1) is pruned in wave -1, beside
    # the new download, and the sync stops before the old download's turn.
    assert names(operation.pruned) == real_results(state, "Pruned"), outcome(state)
    assert model.cluster.get(Key("", "PersistentVolumeClaim", NAMESPACE, CLAIM)) is not None

    app.set_values(good)
    state = app.sync()
    assert state["phase"] == "Succeeded", state.get("message")
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    assert hub.blob_bytes.total() == sent, "the good sync downloaded the model again"
    assert group(app).serves()
    operation = model.sync(APP, NAMESPACE, rendered(good), prune=True)
    assert operation.phase == state["phase"]
    pruned = real_results(state, "Pruned")
    assert names(operation.pruned) == pruned, state["syncResult"]
    wait_for(  # a pruned Job goes once its pods have (the garbage collector, in the background)
        lambda: not any(exists(app.cluster, kind, name) for kind, name in pruned),
        120,
        f"the pruned {sorted(pruned)} gone",
    )


def test_a_switch_to_a_pvc_model_prunes_the_download_and_keeps_the_claim(
    app: Application, first_sync: tuple[Obj, list[str]], tiny_model: Path
) -> None:
    """The model moved to a claim of the user's (``pvc://``), synced with prune: the download Job
    is pruned, the chart's claim is not (keepOnUninstall: ``Prune=false``), and the group serves
    from the user's claim, as the model says."""
    claim = app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"]
    model = modelled(app.values)
    pvc = on_users_claim(app.cluster, app.values, tiny_model)
    app.set_values(pvc)
    state = sync_a_move_of_the_group(app)
    assert state["phase"] == "Succeeded", outcome(state)
    pruned = real_results(state, "Pruned")
    assert any(k == "Job" and n.startswith(f"{ISVC}-download-") for k, n in pruned), pruned
    assert ("PersistentVolumeClaim", CLAIM) not in pruned
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    operation = model.sync(APP, NAMESPACE, rendered(pvc), prune=True)
    assert operation.phase == "Succeeded"
    assert names(operation.pruned) == pruned, outcome(state)
    wait_for(
        lambda: not [j for j in app.cluster.items("jobs", "-n", NAMESPACE) if is_download(j)],
        120,
        "the pruned download Job gone",
    )
    assert group(app).serves()


def test_deleting_the_app_keeps_the_claim_as_keep_on_uninstall_says(
    app: Application, first_sync: tuple[Obj, list[str]]
) -> None:
    """A cascading deletion (the finalizer `argocd app delete` uses) takes what the app tracks
    but the claim (keepOnUninstall, the default: ``Delete=false``), as the model says."""
    claim = app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"]
    tracked = app.tracked()
    app.delete()
    assert app.cluster.items("inferenceservices", "-n", NAMESPACE) == []
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    left = present(app.cluster, tracked)
    assert names(modelled(app.values).delete_app(APP)) == tracked - left
    assert left == {("PersistentVolumeClaim", CLAIM)}


def test_an_app_that_lets_the_claim_go_deletes_it_with_the_rest(
    app: Application, first_sync: tuple[Obj, list[str]], hub: FakeHub, repo: Path
) -> None:
    """``keepOnUninstall: false``, the other answer: an Application made again over the kept
    claim adopts it (the group serves from it, nothing downloaded again), and its deletion takes
    the claim with everything else, as the model says."""
    claim = app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"]
    sent = hub.blob_bytes.total()
    values = app_values(app.cluster, hub)  # hf:// again: the last app had moved to pvc://
    values["model"]["storage"]["keepOnUninstall"] = False
    again = Application(app.cluster, values)
    again.create(repo)
    state = again.sync()
    assert state["phase"] == "Succeeded", outcome(state)
    assert app.cluster.get("-n", NAMESPACE, f"pvc/{CLAIM}")["metadata"]["uid"] == claim
    assert hub.blob_bytes.total() == sent, "the adopted claim's model was downloaded again"
    assert group(again).serves()
    tracked = again.tracked()
    assert ("PersistentVolumeClaim", CLAIM) in tracked
    again.delete()
    # The claim's protection finalizer holds it until the last pod using it has gone.
    wait_for(
        lambda: not exists(app.cluster, "PersistentVolumeClaim", CLAIM), 180, "the claim deleted"
    )
    assert present(app.cluster, tracked) == set()
    assert names(modelled(again.values).delete_app(APP)) == tracked


def test_a_switch_to_a_pvc_model_prunes_a_claim_the_app_lets_go(
    app: Application, hub: FakeHub, repo: Path, tiny_model: Path
) -> None:
    """``keepOnUninstall: false`` under prune, a case only the model had taken: an app over hf://
    that lets its claim go, moved to a claim of the user's and synced with prune, prunes the
    chart's claim with the download Job, as the model says. The group's pods mount the claim
    until KServe has moved them to the user's, and Argo CD applies nothing more while a pruned
    object is going, so the chart has it pruned last (``PruneLast``): pruned in wave -1, before
    the InferenceService's update, the sync waited for ever (the first run of this test)."""
    values = app_values(app.cluster, hub)
    values["model"]["storage"]["keepOnUninstall"] = False
    drop = Application(app.cluster, values)
    drop.create(repo)
    try:
        state = drop.sync()
        assert state["phase"] == "Succeeded", outcome(state)
        model = modelled(values)
        pvc = on_users_claim(app.cluster, values, tiny_model)
        drop.set_values(pvc)
        # a group's restart, with room; the hang was for ever
        state = sync_a_move_of_the_group(drop, timeout=420)
        assert state["phase"] == "Succeeded", outcome(state)
        pruned = real_results(state, "Pruned")
        assert ("PersistentVolumeClaim", CLAIM) in pruned, outcome(state)
        # Results are listed in the order they were first recorded (``setResourceResult``).
        recorded = [(r["kind"], r["name"]) for r in state["syncResult"]["resources"]]
        claim_pruned = recorded.index(("PersistentVolumeClaim", CLAIM))
        assert claim_pruned > recorded.index(("InferenceService", ISVC)), outcome(state)
        operation = model.sync(APP, NAMESPACE, rendered(pvc), prune=True)
        assert operation.phase == "Succeeded"
        assert names(operation.pruned) == pruned, outcome(state)
        wait_for(
            lambda: not exists(app.cluster, "PersistentVolumeClaim", CLAIM),
            300,
            "the pruned claim gone once no pod mounts it",
        )
        assert group(drop).serves()
    finally:
        drop.delete()


def test_the_old_chart_loses_its_claim_to_a_failed_sync(
    cluster: RealCluster, hub: FakeHub, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The finding the lifecycle fixes began with, on the chart before them (OLD_COMMIT): its
    claim is a PreSync hook with delete policy HookFailed, and a sync whose download fails deletes
    it, as argo_model.py says (tests/lifecycle/test_model_volume.py's ``old`` case). The download
    runs on a FAKE of KServe's storage-initializer image, as in test_migration.py; it fails on a
    repo the Hub does not have, in PreSync, so no group starts."""
    provide_storage_initializer(cluster, f"docker.io/kserve/storage-initializer:v{cluster.kserve}")
    repo = gitops_repo(chart_dir("old"), tmp_path_factory.mktemp("gitops-old") / "repo")
    values: Obj = {
        "model": {"uri": "hf://org/missing", "storage": {"size": "1Gi"}},
        "modelCache": {"endpoint": hub.url},
        "kserve": {"version": cluster.kserve},
        # Its default, a ClusterServingRuntime, is refused beside KServe's built-in one
        # (test_migration.py's Migration.old_args says why).
        "runtime": {"scope": "Namespace"},
        "download": {"backoffLimit": 0},
    }
    old = Application(cluster, values, name="old", namespace="argo-old")
    claim, job = f"{old.name}-multinode-llm-model", f"{old.name}-multinode-llm-download"
    cluster.kubectl("create", "namespace", old.namespace)
    old.create(repo)
    try:
        state = old.sync(timeout=300)
        assert state["phase"] == "Failed", outcome(state)
        hooks = {(r["kind"], r["name"]): r for r in state["syncResult"]["resources"]}
        assert hooks[("PersistentVolumeClaim", claim)].get("hookType") == "PreSync", hooks
        # Deleted, though not gone: the failed download's pod (kept until the next sync's
        # BeforeHookCreation deletes its Job) still names the claim, so the claim's protection
        # finalizer holds it, and whatever it holds goes with it then.
        wait_for(
            lambda: deleted(cluster, "PersistentVolumeClaim", claim, old.namespace),
            120,
            "the failed sync to delete the old chart's claim",
        )
        model = ArgoCD(FakeCluster(job_fails=is_download))
        docs = render("helm4", "old", values, namespace=old.namespace, base=False, release=old.name)
        operation = model.sync(old.name, old.namespace, docs)
        assert operation.phase == state["phase"]
        assert names(operation.deleted_hooks) == {("PersistentVolumeClaim", claim)}
        # The way out is by hand: deleting the app would wait on the claim for ever, for
        # Argo CD deletes nothing more while a tracked object is being deleted
        # (finalizeApplicationDeletion, controller/appcontroller.go, v3.5.1). Without the Job
        # the claim goes.
        delete_job(cluster, job, old.namespace)
        wait_for(
            lambda: not exists(cluster, "PersistentVolumeClaim", claim, old.namespace),
            120,
            "the old chart's claim gone",
        )
    finally:
        delete_job(cluster, job, old.namespace)
        old.delete()
        cluster.kubectl("delete", "namespace", old.namespace, "--wait=false")


def present(
    cluster: RealCluster, keys: set[tuple[str, str]], namespace: str = NAMESPACE
) -> set[tuple[str, str]]:
    """Those of ``keys`` (kind, name) that exist in ``namespace``."""
    return {(kind, name) for kind, name in keys if exists(cluster, kind, name, namespace)}


def exists(cluster: RealCluster, kind: str, name: str, namespace: str = NAMESPACE) -> bool:
    found = cluster.kubectl("get", "-n", namespace, kind, name, "--ignore-not-found", "-o", "name")
    return bool(found.strip())


def delete_job(cluster: RealCluster, job: str, namespace: str) -> None:
    """``job`` and its pods, once they are gone."""
    cluster.kubectl("-n", namespace, "delete", "job", job, "--ignore-not-found",
                    "--cascade=foreground", "--timeout=120s", timeout=150)  # fmt: skip


def deleted(cluster: RealCluster, kind: str, name: str, namespace: str) -> bool:
    """Whether ``name`` is gone or has been asked to go (a finalizer may hold it a while)."""
    fields = "jsonpath={.metadata.name} {.metadata.deletionTimestamp}"
    found = cluster.kubectl("get", "-n", namespace, kind, name, "--ignore-not-found", "-o", fields)
    return len(found.split()) != 1  # none: gone; two: the name and its deletion's time


def modelled(values: Obj) -> ArgoCD:
    """tests/lifecycle's Argo CD model on its fake API server, synced to ``values`` as the real
    app is before the step a test compares (the model has no InferenceService health, so it
    follows the real run only where a step does not turn on it)."""
    model = ArgoCD(FakeCluster())
    assert model.sync(APP, NAMESPACE, rendered(values), prune=True).phase == "Succeeded"
    return model


def rendered(values: Obj) -> list[Doc]:
    """The chart as Argo CD's repo server renders it (``helm template``), for the model."""
    return render("helm4", "new", values, namespace=NAMESPACE, base=False)


def is_download(doc: Doc) -> bool:
    return doc["kind"] == "Job" and component(doc) == "model-download"


def real_results(state: Obj, status: str) -> set[tuple[str, str]]:
    """(kind, name) of each object the real sync gave ``status`` (Synced, Pruned, ...)."""
    resources = (state.get("syncResult") or {}).get("resources") or []
    return {(r["kind"], r["name"]) for r in resources if r.get("status") == status}


def outcome(state: Obj) -> list[str]:
    """The operation's message and each object's result, for a failure message."""
    resources = (state.get("syncResult") or {}).get("resources") or []
    results = [f"{r['kind']}/{r['name']}: {r.get('status')} {r.get('message')}" for r in resources]
    return [f"{state.get('phase')}: {state.get('message')}", *results]


def names(keys: list[Key] | set[Key]) -> set[tuple[str, str]]:
    return {(k.kind, k.name) for k in keys}
