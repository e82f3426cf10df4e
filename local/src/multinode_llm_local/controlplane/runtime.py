"""The node agent's stand-in for a container runtime: what each image is, here.

A node of the real cluster pulls no image (nothing outside this machine can be reached, and there
is no container engine). Each image a pod may name is instead one of:

- this project's own images (``ghcr.io/multinode-llm/*``): this machine's filesystem and Python
  environment, as the emulated local cluster runs them (``container.py``), whose ``multinode-llm``
  is the runtime the image would hold;
- a program built here from its Go module (``build.py``), laid out in a root filesystem of its own
  at the path its real image has it, with the image's entrypoint and user: KServe's manager (for
  the one release the cluster runs), LeaderWorkerSet's manager, kube-rbac-proxy and CoreDNS.

Any other image fails as a pull would (``ErrImagePull``), naming the image and what is known.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from multinode_llm_local.images import repository

COREDNS_IMAGE = "registry.k8s.io/coredns/coredns"
OWN_REPOSITORIES = (
    "ghcr.io/multinode-llm/multinode-llm",
    "ghcr.io/multinode-llm/multinode-llm-cache",
)


@dataclass(frozen=True)
class GoImage:
    """An image that holds one Go program: which, where, and the image's user."""

    program: str  # a key of the cluster's programs (cluster.json)
    path: str
    user: int | None
    tag: str = ""  # only this tag is built here ("" = any)


@dataclass(frozen=True)
class Image:
    """How the agent runs an image: its root filesystem ("" = this machine's), entrypoint, user."""

    rootfs: str
    entrypoint: tuple[str, ...]
    user: int | None = None


class ImageUnavailableError(Exception):
    """No stand-in for this image here (the agent reports ErrImagePull with this message)."""


def go_images(kserve_version: str, lws_version: str = "") -> dict[str, GoImage]:
    """The Go images, by repository (their Dockerfiles: distroless, ``USER nonroot`` 65532)."""
    return {
        "kserve/kserve-controller": GoImage("manager", "/manager", 65532, f"v{kserve_version}"),
        "registry.k8s.io/lws/lws": GoImage("lws", "/manager", 65532, lws_version or "none"),
        "quay.io/brancz/kube-rbac-proxy": GoImage(
            "kube-rbac-proxy", "/usr/local/bin/kube-rbac-proxy", 65532
        ),
        COREDNS_IMAGE: GoImage("coredns", "/coredns", None),
    }


def resolve(
    image: str,
    programs: Mapping[str, str],
    kserve_version: str,
    cache: Path,
    lws_version: str = "",
) -> Image:
    """The stand-in for ``image``, or ImageUnavailableError saying why there is none."""
    repo = repository(image)
    tag = image.split("@", 1)[0].rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    if repo in OWN_REPOSITORIES:
        return Image(rootfs="", entrypoint=("multinode-llm",))
    known = go_images(kserve_version, lws_version)
    spec = known.get(repo)
    if spec is None:
        raise ImageUnavailableError(
            f"image {image!r} is not available on this node: the node agent (a stand-in for a "
            f"kubelet with a container runtime) runs only {', '.join([*OWN_REPOSITORIES, *known])}"
        )
    if spec.tag and tag != spec.tag:
        raise ImageUnavailableError(
            f"image {image!r}: only {repo}:{spec.tag} is built for this cluster "
            f"(KServe {kserve_version}, LeaderWorkerSet {lws_version or 'not built'}); "
            "other tags are not"
        )
    root = _root_for(spec, Path(programs[spec.program]), cache)
    return Image(rootfs=str(root), entrypoint=(spec.path,), user=spec.user)


def _root_for(spec: GoImage, program: Path, cache: Path) -> Path:
    """A root filesystem holding ``program`` at ``spec.path`` (made once per build)."""
    root = cache / f"{spec.program}-{program.parent.name}"
    target = root / spec.path.lstrip("/")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        for folder in ("tmp", "etc", "proc", "sys", "dev"):
            (root / folder).mkdir(exist_ok=True)
        (root / "tmp").chmod(0o1777)
        temporary = target.with_suffix(".partial")
        try:
            os.link(program, temporary)
        except OSError:
            shutil.copy2(program, temporary)
        temporary.rename(target)
    return root
