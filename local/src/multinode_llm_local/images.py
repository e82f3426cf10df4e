"""Containers run from built images instead of this machine's Python (``UpOptions.images``).

Each container whose image repository is mapped to a local buildah image (``hack/build-images.sh``
built it) gets a buildah working container of that image: its own writable layer, as a container
runtime gives every container. Its root filesystem is mounted on this machine, and the
container's init (``container.py``) makes it the container's root: read-only where the pod says,
the pod's volumes mounted into it, ``/etc/hosts`` and ``/etc/resolv.conf`` from the pod's network
namespace. The environment follows Kubernetes: the image's own (``PATH``, ``HF_HOME``) first, the
container's over it. ``down`` removes the working containers with the cluster.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import replace

from multinode_llm.errors import UserError

from multinode_llm_local.pods import ContainerPlan, PodPlan
from multinode_llm_local.state import ClusterPlan


def repository(image: str) -> str:
    """``registry/name`` of an image reference, without its tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def attach(plan: ClusterPlan, images: Mapping[str, str]) -> ClusterPlan:
    """The plan with every mapped container running from a fresh working container of its image.

    ``images`` maps a repository as the chart renders it (``ghcr.io/multinode-llm/multinode-llm``)
    to a local image (``ghcr.io/multinode-llm/multinode-llm:0.1.0-cpu``). On failure, the
    working containers made so far are removed again.
    """
    made: list[str] = []
    try:
        pods = [_attach_pod(plan.prefix, pod, images, made) for pod in plan.pods]
    except BaseException:
        remove(made)
        raise
    return replace(plan, pods=pods)


def _attach_pod(prefix: str, pod: PodPlan, images: Mapping[str, str], made: list[str]) -> PodPlan:
    if pod.pending:
        return pod
    containers = []
    for container in pod.containers:
        local = images.get(repository(container.image))
        if local is None:
            containers.append(container)
            continue
        name = f"{prefix}-{pod.name}-{container.name}"
        made.append(_buildah("from", "--pull=never", "--quiet", "--name", name, local))
        containers.append(_from_image(container, name, local))
    return replace(pod, containers=containers)


def _from_image(container: ContainerPlan, working: str, local: str) -> ContainerPlan:
    rootfs = _buildah("mount", working)
    inspected = json.loads(_buildah("inspect", "--type", "container", working))
    config = inspected["OCIv1"].get("config") or {}
    image_env = dict(item.split("=", 1) for item in config.get("Env") or [])
    # The host's PATH (this Python environment first) means nothing inside the image.
    env = {key: value for key, value in container.env.items() if key != "PATH"}
    return replace(
        container,
        env={**image_env, **env},
        rootfs=rootfs,
        working_container=working,
        image=local,
    )


def working_containers(plan: ClusterPlan) -> list[str]:
    return [c.working_container for p in plan.pods for c in p.containers if c.working_container]


def remove(names: list[str]) -> None:
    """Remove working containers (their mounts and writable layers); names already gone are
    skipped."""
    for name in names:
        subprocess.run(["buildah", "rm", name], capture_output=True, check=False)


def _buildah(*args: str) -> str:
    try:
        result = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError(
            "running containers from images needs buildah: bash hack/install-packages.sh buildah"
        ) from None
    if result.returncode != 0:
        raise UserError(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()
