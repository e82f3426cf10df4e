"""The chart's download Job (templates/model-download.yaml), rendered by real helm for each
supported KServe release and run here (pod.py) with that release's storage code on a fresh volume.

The Job runs KServe's storage initializer with ``[hf://ORG/NAME[:REV], /mnt/models/<path>]``. The
initializer of 0.15.0 to 0.18.1 creates its target with one os.mkdir (``makesParents: false`` in
kserve-releases.yaml), so a nested target on a fresh volume fails there; for those releases the Job
must first run an init container ``make-target`` (the same image, ``mkdir -p <the target>``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.cache.fake_hub import FakeHub, FakeRepo
from tests.cache.harness import assert_same_files, model_files
from tests.chart import chartlib
from tests.storage.pod import JobPod, model_files_in
from tests.storage.sites import Release, Site, load_table, releases

RELEASES = releases()
CHART = chartlib.CHART
TOKEN, SECRET = "hf_download_job", "hf-token"
MOUNT = "/mnt/models"


def by_version(release: Release) -> str:
    return release.version


def render(release: Release, hub_url: str = "http://hub.invalid:8090") -> list[dict[str, Any]]:
    """The chart for ``release`` with an hf:// model, its token Secret, and ``hub_url`` as the Hub.

    The Hub cannot be reached from here: modelCache.endpoint, the chart's own way to send the Job
    elsewhere, points it at the fake Hub, so every variable the container gets is the chart's.
    kserve.deploymentMode is the table's name for the release (the chart refuses any other).
    """
    if not chartlib.helm("helm4").exists():
        pytest.skip("helm is not installed: bash hack/install-tools.sh (tox -e storage runs it)")
    mode = load_table()["releases"][release.version]["deploymentMode"]
    rendered = chartlib.run_helm(
        "helm4",
        "template",
        chartlib.RELEASE,
        str(CHART),
        "--namespace",
        chartlib.NAMESPACE,
        "--kube-version",
        chartlib.KUBE_HIGHEST,
        "--set-string",
        f"kserve.version={release.version}",
        "--set-string",
        f"kserve.deploymentMode={mode}",
        "--set",
        "model.uri=hf://org/model",
        "--set",
        f"model.hfTokenSecret.name={SECRET}",
        "--set",
        f"modelCache.endpoint={hub_url}",
    )
    return rendered.documents()


def download_job(documents: list[dict[str, Any]]) -> dict[str, Any]:
    name = f"{chartlib.RELEASE}-multinode-llm-download"
    [job] = [d for d in documents if d["kind"] == "Job" and d["metadata"]["name"] == name]
    return job


def staged_path(documents: list[dict[str, Any]]) -> tuple[str, str]:
    """(claim, path in it) the InferenceService serves from: its storageUri pvc://CLAIM/PATH."""
    [isvc] = [d for d in documents if d["kind"] == "InferenceService"]
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    claim, _, path = uri.removeprefix("pvc://").partition("/")
    return claim, path


def main_container(job: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"]
    [container] = containers
    return container


def model_volume(job: dict[str, Any]) -> str:
    """The name of the Job's volume mounted at /mnt/models."""
    [mount] = [m for m in main_container(job)["volumeMounts"] if m["mountPath"] == MOUNT]
    return str(mount["name"])


def run_job(
    job: dict[str, Any], site: Site, tmp_path: Path, release: Release
) -> tuple[JobPod, Any]:
    pod = JobPod(
        job,
        tmp_path,
        site,
        image=f"docker.io/kserve/storage-initializer:v{release.version}",
        secrets={SECRET: {"token": TOKEN}},
    )
    return pod, pod.run()


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_download_job_stages_the_model_where_the_inference_service_reads_it(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    """Every init container, then the initializer with the rendered args and env, on a fresh claim:
    the files arrive byte for byte at the path the InferenceService's storageUri names (a gated
    repo: the token reaches the Hub only through the rendered HF_TOKEN_PATH)."""
    files = model_files(seed=60, shard_size=1 << 20)
    fake_hub.add(FakeRepo("org/model", files, gated=True, readers={TOKEN}))
    documents = render(release, fake_hub.url)
    job = download_job(documents)

    pod, run = run_job(job, storage_sites[release.version], tmp_path, release)
    assert run.ok, f"the download Job fails on KServe {release.version}:\n{run.report()}"
    claim, path = staged_path(documents)
    [volume] = [
        v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == model_volume(job)
    ]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    assert_same_files(pod.volumes[volume["name"]] / path, files)
    assert model_files_in(pod.volumes[volume["name"]] / path) == sorted(files)


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_without_its_init_containers_the_job_fails_exactly_where_the_initializer_makes_no_parents(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    """The finding: the initializer alone on a fresh volume, target models/ORG/NAME/REV. Expected
    from the table's makesParents, so a table change moves the expectation."""
    files = model_files(seed=61, shard_size=1 << 20)
    fake_hub.add(FakeRepo("org/model", files, gated=True, readers={TOKEN}))
    job = copy.deepcopy(download_job(render(release, fake_hub.url)))
    job["spec"]["template"]["spec"].pop("initContainers", None)

    pod, run = run_job(job, storage_sites[release.version], tmp_path, release)
    target = pod.host_path(main_container(job), main_container(job)["args"][1])
    if release.makes_parents:
        assert run.ok, run.report()
        assert_same_files(target, files)
    else:
        assert not run.ok, f"KServe {release.version} created the target's parents itself"
        assert run.failed == main_container(job)["name"]
        assert "FileNotFoundError" in run.report(), run.report()
        assert model_files_in(pod.volumes[model_volume(job)]) == []
        assert fake_hub.blob_gets.total() == 0


@pytest.mark.parametrize("release", [r for r in RELEASES if not r.makes_parents], ids=by_version)
def test_make_target_creates_the_target_first_where_the_initializer_makes_no_parents(
    release: Release,
) -> None:
    """The contract, as rendered: an init container make-target, the initializer's image,
    ``mkdir -p <the initializer's target>`` on the same volume at the same place."""
    job = download_job(render(release))
    spec = job["spec"]["template"]["spec"]
    main = main_container(job)
    init = {c["name"]: c for c in spec.get("initContainers", [])}
    assert "make-target" in init, (
        f"KServe {release.version} makes no parents of the target: the Job needs make-target"
    )
    make_target = init["make-target"]
    assert make_target["image"] == main["image"]
    assert make_target["command"] == ["mkdir", "-p", main["args"][1]]
    assert not make_target.get("args")
    assert {"name": model_volume(job), "mountPath": MOUNT} in make_target["volumeMounts"]


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_download_job_gives_the_initializer_a_writable_hf_home(release: Release) -> None:
    """The root filesystem is read-only; huggingface_hub 0.26.5 (KServe 0.15.0) fails when it cannot
    write under HF_HOME (test_releases.py). HF_HOME must lie on a writable emptyDir."""
    job = download_job(render(release))
    main = main_container(job)
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in main["env"]}
    hf_home = env["HF_HOME"]
    assert hf_home
    [mount] = [
        m
        for m in main["volumeMounts"]
        if hf_home == m["mountPath"] or hf_home.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert not mount.get("readOnly")
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume, volume
