"""The images hack/build-images.sh built (build/images.env), mounted for the tests.

Skips, saying why, where buildah is absent, where this is not root, or where the images were not
built; `tox -e image` builds them first.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image.rootfs import MountedImage

ROOT = Path(__file__).resolve().parents[2]
IMAGES_ENV = ROOT / "build" / "images.env"


def built_images() -> dict[str, str]:
    """IMAGE, CACHE_IMAGE and BASE_IMAGE as hack/build-images.sh last wrote them."""
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (bash hack/install-packages.sh buildah)")
    if os.geteuid() != 0:
        pytest.skip("mounting an image's root filesystem needs root")
    if not IMAGES_ENV.exists():
        pytest.skip(f"no images built: {IMAGES_ENV} is missing (bash hack/build-images.sh)")
    pairs = (line.split("=", 1) for line in IMAGES_ENV.read_text().splitlines() if "=" in line)
    return dict(pairs)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    found = built_images()
    for key in ("IMAGE", "CACHE_IMAGE"):
        if key not in found:
            pytest.skip(f"{IMAGES_ENV} names no {key} (bash hack/build-images.sh)")
    return found


@pytest.fixture(scope="session")
def serving(images: dict[str, str]) -> Iterator[MountedImage]:
    mounted = MountedImage(images["IMAGE"])
    yield mounted
    mounted.close()


@pytest.fixture(scope="session")
def cache(images: dict[str, str]) -> Iterator[MountedImage]:
    mounted = MountedImage(images["CACHE_IMAGE"])
    yield mounted
    mounted.close()
