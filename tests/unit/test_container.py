"""The container init keeps the Python environment (the container's "image") reachable."""

from __future__ import annotations

import os
from pathlib import Path

from multinode_llm_local.container import _keep_image_paths


def test_an_environment_below_a_closed_directory_of_a_covered_checkout_is_kept(
    tmp_path: Path,
) -> None:
    # A checkout under /tmp (the pod's own /tmp covers it) whose .tox others cannot pass (0700, so
    # it is covered too): the venv inside must be bound back, not only the checkout around it.
    checkout = tmp_path / "checkout"
    venv = checkout / ".tox" / "unit"
    venv.mkdir(parents=True)
    kept = _keep_image_paths(
        [str(checkout), str(venv)], targets=[str(tmp_path), str(checkout / ".tox")]
    )
    try:
        assert list(kept) == [str(checkout), str(venv)]
    finally:
        for descriptor in kept.values():
            os.close(descriptor)


def test_paths_outside_every_mount_are_left_alone(tmp_path: Path) -> None:
    assert _keep_image_paths([str(tmp_path)], targets=["/mnt/models", "/dev/shm"]) == {}
