"""The chart's download Job (templates/model-download.yaml), rendered by real helm and run here as
its pod would run (multinode_llm_testing.job_pod stands in for the kubelet): `multinode-llm stage`
with the rendered arguments and environment, on a fresh claim, against the fake Hub. The snapshot
lands where the InferenceService reads it, as the revision its head is told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from multinode_llm.staging import layout
from multinode_llm_testing import chartlib
from multinode_llm_testing.cache import assert_same_files, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.job_pod import JobPod

TOKEN, SECRET = "hf_download_job", "hf-token"
IMAGE = "ghcr.io/multinode-llm/multinode-llm-cache:0.1.0"


def render(hub_url: str, uri: str = "hf://org/model", **sets: str) -> list[dict[str, Any]]:
    """The chart with an hf:// model, its token Secret, and ``hub_url`` as the Hub (through
    modelCache.endpoint, the chart's own way to send the Job elsewhere)."""
    if not chartlib.helm("helm4").exists():
        pytest.skip("helm is not installed: bash hack/install-tools.sh (tox runs it)")
    args = ["--set", f"model.uri={uri}", "--set", f"model.hfTokenSecret.name={SECRET}"]
    args += ["--set", f"modelCache.endpoint={hub_url}"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return chartlib.run_helm(
        "helm4", "template", chartlib.RELEASE, str(chartlib.CHART), "-n", chartlib.NAMESPACE, *args
    ).documents()


def one(documents: list[dict[str, Any]], kind: str, component: str = "") -> dict[str, Any]:
    [found] = [
        d
        for d in documents
        if d["kind"] == kind
        and (not component or d["metadata"]["labels"]["app.kubernetes.io/component"] == component)
    ]
    return found


def test_the_job_stages_the_snapshot_the_head_is_told_to_serve(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    files = model_files(seed=60, shard_size=1 << 20)
    repo = fake_hub.add(FakeRepo("org/model", files, gated=True, readers={TOKEN}))
    documents = render(fake_hub.url)
    job, isvc = one(documents, "Job", "model-download"), one(documents, "InferenceService")

    pod = JobPod(job, tmp_path, None, image=IMAGE, secrets={SECRET: {"token": TOKEN}})
    run = pod.run()
    assert run.ok, run.report()

    model = isvc["spec"]["predictor"]["model"]
    claim, _, path = model["storageUri"].removeprefix("pvc://").partition("/")
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "model"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    revision = {e["name"]: e["value"] for e in model["env"]}["MODEL_REVISION"]
    assert revision == "main"
    snapshot = layout.staged_model(pod.volumes["model"] / path, revision)
    assert snapshot.name == repo.commit
    assert_same_files(snapshot, files)


def test_the_job_gives_huggingface_hub_a_writable_home_on_a_read_only_root() -> None:
    job = one(render("http://hub.invalid"), "Job", "model-download")
    [stage] = job["spec"]["template"]["spec"]["containers"]
    assert stage["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in stage["env"]}
    assert env["HF_HOME"].startswith("/tmp/")
    assert {"name": "scratch", "mountPath": "/tmp"} in stage["volumeMounts"]
    assert "HF_TOKEN" not in env  # the token is a file, never an env value


def test_the_job_is_renamed_when_its_spec_changes_and_only_then() -> None:
    """A Job's pod template cannot change: a new spec needs a new Job, an unchanged one none."""

    def name(uri: str = "hf://org/model", **values: str) -> str:
        job = one(render("http://hub.invalid", uri, **values), "Job", "model-download")
        return str(job["metadata"]["name"])

    base = name()
    same = name(**{"tests.prompt": "other"})
    moved = name(uri="hf://org/model:v2")
    assert base == same
    assert base != moved
    assert base.startswith(f"{chartlib.RELEASE}-multinode-llm-download-")
