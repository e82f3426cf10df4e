"""PP=2, TP=1 from the built images: the head's and the worker's containers run from the serving
image's root filesystem, not from this machine's Python, and the group answers a chat completion.

The images are hack/build-images.sh's (build/images.env; `tox -e image`, listed before `e2e`,
builds them). Each container gets a buildah working container of its image, read-only, with the
pod's volumes mounted where the pod spec says; `down` removes them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, chat_once, local_group
from multinode_llm_local.images import repository

SCENARIO = "PP=2 TP=1 from the image"
IMAGES_ENV = Path(__file__).resolve().parents[2] / "build" / "images.env"


def built_images() -> dict[str, str]:
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (bash hack/install-packages.sh buildah)")
    if not IMAGES_ENV.exists():
        pytest.skip(f"no images built: {IMAGES_ENV} is missing (bash hack/build-images.sh)")
    pairs = (line.split("=", 1) for line in IMAGES_ENV.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs if key in ("IMAGE", "CACHE_IMAGE")}


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    images = built_images()
    mapping = {repository(image): image for image in images.values()}
    with local_group(SCENARIO, tiny_model, images=mapping) as running:
        yield running
    names = {c.working_container for p in running.plan.pods for c in p.containers}
    listed = subprocess.run(
        ["buildah", "containers", "--format", "{{.ContainerName}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert names & set(listed) == set(), "working containers left behind"


def test_head_and_worker_run_from_the_serving_image(group: LocalGroup) -> None:
    for pod in group.plan.pods:
        for container in pod.containers:
            assert container.rootfs, f"{pod.name}/{container.name} runs from this machine"
            assert container.image.endswith("-cpu")
    for role in ("head", "worker"):
        script = "command -v multinode-llm; id -u; touch /x 2>/dev/null && echo rw || echo ro"
        where = group.exec(role, ["sh", "-c", script])
        assert where.split() == ["/usr/local/bin/multinode-llm", "1000", "ro"]


def test_chat_completion_from_the_image(group: LocalGroup) -> None:
    assert chat_once(group, "Say hello.") != ""
