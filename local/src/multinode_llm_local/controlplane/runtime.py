"""The node agent's stand-in for a container runtime: what each image is, here.

A node of the real cluster pulls no image (nothing outside this machine can be reached, and there
is no container engine). Each image a pod may name is instead one of:

- this project's own images (``ghcr.io/multinode-llm/*``): this machine's filesystem and Python
  environment, as the emulated local cluster runs them (``container.py``), whose ``multinode-llm``
  is the runtime the image would hold;
- a program built here from its Go module (``build.py``), laid out in a root filesystem of its own
  at the path its real image has it, with the image's entrypoint and user: KServe's manager (for
  the one release the cluster runs), KServe's llmisvc controller (at the same release, where
  ``local/go`` builds one), LeaderWorkerSet's manager, kube-rbac-proxy and CoreDNS.

- an image a test provides for this cluster (``provide``): a command of this machine, with the
  image's environment and the folders it runs from. The tests provide KServe's storage initializer
  this way, as its release's own storage code (``multinode_llm_testing.storage_sites``).

Any other image fails as a pull would (``ErrImagePull``), naming the image and what is known.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from multinode_llm_local.images import repository

COREDNS_IMAGE = "registry.k8s.io/coredns/coredns"
PROVIDED = "provided-images.json"  # in the cluster's state directory
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
    """How the agent runs an image: its root filesystem ("" = this machine's), entrypoint, user,
    and for a provided image its environment (the image's ENV) and the folders it runs from."""

    rootfs: str
    entrypoint: tuple[str, ...]
    user: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    paths: tuple[str, ...] = ()


class ImageUnavailableError(Exception):
    """No stand-in for this image here (the agent reports ErrImagePull with this message)."""


def go_images(
    kserve_version: str, lws_version: str = "", llmisvc_version: str = ""
) -> dict[str, GoImage]:
    """The Go images, by repository (their Dockerfiles: distroless, ``USER nonroot`` 65532)."""
    return {
        "kserve/kserve-controller": GoImage("manager", "/manager", 65532, f"v{kserve_version}"),
        "registry.k8s.io/lws/lws": GoImage("lws", "/manager", 65532, lws_version or "none"),
        # KServe's llmisvc controller: the manager's release, where local/go/llmisvc-v* builds it
        "kserve/llmisvc-controller": GoImage(
            "llmisvc", "/manager", 65532, llmisvc_version or "none"
        ),
        "quay.io/brancz/kube-rbac-proxy": GoImage(
            "kube-rbac-proxy", "/usr/local/bin/kube-rbac-proxy", 65532
        ),
        COREDNS_IMAGE: GoImage("coredns", "/coredns", None),
    }


def provide(state_dir: Path, image: str, stand_in: Image) -> None:
    """Run ``image`` (a full reference, with its tag) as ``stand_in`` on this cluster's nodes from
    now on: a test's own stand-in for an image no node can pull."""
    path = state_dir / PROVIDED
    found = json.loads(path.read_text()) if path.is_file() else {}
    found[image] = asdict(stand_in)
    temporary = path.with_suffix(".partial")
    temporary.write_text(json.dumps(found, indent=1))
    temporary.rename(path)  # the agents read it at each container start


def provided(state_dir: Path) -> dict[str, Image]:
    """The images tests provide on this cluster (``provide``), by reference."""
    path = state_dir / PROVIDED
    found = json.loads(path.read_text()) if path.is_file() else {}
    return {
        image: Image(
            **spec | {"entrypoint": tuple(spec["entrypoint"]), "paths": tuple(spec["paths"])}
        )
        for image, spec in found.items()
    }


def resolve(
    image: str,
    programs: Mapping[str, str],
    kserve_version: str,
    cache: Path,
    lws_version: str = "",
    stand_ins: Mapping[str, Image] | None = None,
    llmisvc_version: str = "",
) -> Image:
    """The stand-in for ``image``, or ImageUnavailableError saying why there is none."""
    repo, tag = repository(image), _tag(image)
    if repo in OWN_REPOSITORIES:
        return Image(rootfs="", entrypoint=("multinode-llm",))
    stand_ins = stand_ins or {}
    for reference, stand_in in stand_ins.items():
        if (repository(reference), _tag(reference)) == (repo, tag):
            return stand_in
    known = go_images(kserve_version, lws_version, llmisvc_version)
    spec = known.get(repo)
    if spec is None:
        runs = [*OWN_REPOSITORIES, *known, *stand_ins]
        raise ImageUnavailableError(
            f"image {image!r} is not available on this node: the node agent (a stand-in for a "
            f"kubelet with a container runtime) runs only {', '.join(runs)}"
        )
    if spec.tag and tag != spec.tag:
        raise ImageUnavailableError(
            f"image {image!r}: only {repo}:{spec.tag} is built for this cluster "
            f"(KServe {kserve_version}, LeaderWorkerSet {lws_version or 'not built'}, KServe's "
            f"llmisvc controller {llmisvc_version or 'not built'}); "
            "other tags are not"
        )
    root = _root_for(spec, Path(programs[spec.program]), cache)
    return Image(rootfs=str(root), entrypoint=(spec.path,), user=spec.user)


def _tag(image: str) -> str:
    """The tag of an image reference ("" when it has none)."""
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else ""


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
