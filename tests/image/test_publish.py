"""Publishing for real: the built images and the chart pushed to an OCI registry, pulled back.

Debian's `docker-registry` (the CNCF distribution registry) runs on loopback with a config of its
own in a temporary directory; hack/publish.sh pushes both images (buildah) and the chart (helm
package + helm push) to it, as the release workflow does to ghcr.io. Then: each image's manifest
in the registry names the config buildah built (the local image id), the digest publish.sh
recorded is the manifest's, `helm pull oci://` returns the very archive that was pushed, and the
chart rendered from `oci://`, pointed at that registry with `image.digest`, runs exactly the
pushed images.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

from tests.image.conftest import ROOT
from tests.image.layers import image_id
from tests.image.test_images import CHART, HELM, pod_specs

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


@pytest.fixture(scope="module")
def registry(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a registry on loopback, stopped (by PID) after the module."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("no docker-registry (bash hack/install-packages.sh docker-registry)")
    work = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{free_port()}"
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(work / "data")}},
        "http": {"addr": address},
    }
    (work / "config.yml").write_text(yaml.safe_dump(config))
    with (work / "registry.log").open("w") as log:
        server = subprocess.Popen(
            [binary, "serve", str(work / "config.yml")], stdout=log, stderr=log
        )
    try:

        def answers() -> bool:
            assert server.poll() is None, (work / "registry.log").read_text()
            try:
                urllib.request.urlopen(f"http://{address}/v2/", timeout=2)
            except OSError:
                return False
            return True

        wait_until(answers, 30, "the registry to answer", interval=0.2)
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def published(registry: str) -> dict[str, str]:
    """What hack/publish.sh pushed (build/published.env)."""
    env = {**os.environ, "PLAIN_HTTP": "1", "HELM": str(HELM)}
    ran = subprocess.run(
        ["bash", str(ROOT / "hack" / "publish.sh"), f"{registry}/multinode-llm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = (ROOT / "build" / "published.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def registry_get(registry: str, path: str, accept: str = MANIFEST_TYPES) -> tuple[bytes, Any]:
    request = urllib.request.Request(f"http://{registry}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read(), response.headers


def manifest(registry: str, ref: str) -> tuple[dict[str, Any], str]:
    """The manifest of ``ref`` (host:port/name:tag) and its digest as the registry reports it."""
    name, tag = ref.removeprefix(f"{registry}/").rsplit(":", 1)
    body, headers = registry_get(registry, f"{name}/manifests/{tag}")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert headers["Docker-Content-Digest"] == digest
    return json.loads(body), digest


@pytest.mark.parametrize("key", ["IMAGE", "CACHE_IMAGE"])
def test_pushed_image_is_the_built_one(
    images: dict[str, str], registry: str, published: dict[str, str], key: str
) -> None:
    pushed, digest = manifest(registry, published[f"{key}_REF"])
    assert digest == published[f"{key}_DIGEST"]
    # The config blob's digest is the image id: the registry holds what buildah built.
    assert pushed["config"]["digest"] == "sha256:" + image_id(images[key])
    name = published[f"{key}_REF"].removeprefix(f"{registry}/").rsplit(":", 1)[0]
    config, _ = registry_get(registry, f"{name}/blobs/{pushed['config']['digest']}", "*/*")
    labels = json.loads(config)["config"]["Labels"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert labels["org.opencontainers.image.version"] == app_version


def test_chart_pulled_back_renders_the_pushed_digests(
    registry: str, published: dict[str, str], tmp_path: Path
) -> None:
    chart_ref, version = published["CHART_REF"], published["CHART_VERSION"]
    _, chart_digest = manifest(registry, f"{chart_ref.removeprefix('oci://')}:{version}")
    assert chart_digest == published["CHART_DIGEST"]
    pull = [str(HELM), "pull", chart_ref, "--version", version, "--plain-http", "-d", str(tmp_path)]
    subprocess.run(pull, check=True, capture_output=True)
    [pulled] = tmp_path.glob("multinode-llm-*.tgz")
    [packaged] = (ROOT / "build" / "chart").glob("multinode-llm-*.tgz")
    assert pulled.read_bytes() == packaged.read_bytes()
    with tarfile.open(pulled) as archive:
        chart_yaml = archive.extractfile("multinode-llm/Chart.yaml")
        assert chart_yaml is not None
        assert yaml.safe_load(chart_yaml)["version"] == version

    serving_repo, serving_tag = published["IMAGE_REF"].rsplit(":", 1)
    cache_repo, cache_tag = published["CACHE_IMAGE_REF"].rsplit(":", 1)
    pins = {
        "image": (serving_repo, serving_tag, published["IMAGE_DIGEST"]),
        "download.image": (cache_repo, cache_tag, published["CACHE_IMAGE_DIGEST"]),
        "modelCache.image": (cache_repo, cache_tag, published["CACHE_IMAGE_DIGEST"]),
    }
    sets = [
        f"--set={key}.{field}={value}"
        for key, values in pins.items()
        for field, value in zip(("repository", "tag", "digest"), values, strict=True)
    ]
    expected = {f"{repo}:{tag}@{digest}" for repo, tag, digest in pins.values()}
    rendered_images: set[str] = set()
    for extra in (["--set=model.uri=hf://org/model"], ["--set=modelCache.enabled=true"]):
        template = [str(HELM), "template", "pub", chart_ref, "--version", version, "--plain-http"]
        out = subprocess.run(
            [*template, *sets, *extra], check=True, capture_output=True, text=True
        ).stdout
        for doc in filter(None, yaml.safe_load_all(out)):
            for spec in pod_specs(doc):
                for container in spec["containers"] + spec.get("initContainers", []):
                    if container.get("image", "").startswith(registry):
                        rendered_images.add(container["image"])
    assert rendered_images == expected
