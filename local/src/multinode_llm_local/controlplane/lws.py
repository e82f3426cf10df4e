"""LeaderWorkerSet on the real cluster: its controller built from ``sigs.k8s.io/lws`` (the version
``local/go/lws`` pins), installed from that module's own Helm chart (``charts/lws``), as LWS's
install docs do with ``helm install lws oci://registry.k8s.io/lws/charts/lws``.

The chart is rendered with ``enableCertManager=true``: the manager then serves the certificates
mounted from its Secrets instead of writing them itself (its internal cert management patches the
Secret and waits for the kubelet to refresh the mounted copy, which the node agent does not do).
``certmanager.py`` issues those Secrets and puts the CA into both webhook configurations and the
CRDs' conversion webhooks. Installed on demand (``multinode-llm-local cluster lws``, or
``cluster.leader_worker_set``): a cluster without it has no LeaderWorkerSet kind, as most clusters.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build, certmanager
from multinode_llm_local.controlplane.kubectl import Kubectl
from multinode_llm_local.controlplane.pki import Pki

Obj = dict[str, Any]
MODULE = "sigs.k8s.io/lws"
IMAGE = "registry.k8s.io/lws/lws"
NAMESPACE = "lws-system"
RELEASE = "lws"
CRDS = ("leaderworkersets.leaderworkerset.x-k8s.io", "disaggregatedsets.disaggregatedset.x-k8s.io")
READY_S = 300.0


def module() -> build.Module:
    return build.modules()["lws"]


def version() -> str:
    """The LeaderWorkerSet release ``local/go/lws`` pins (``v0.9.0``)."""
    return module().required(MODULE)


def module_dir(release: str = "") -> Path:
    """The module's files in Go's module cache (downloaded by its build), at ``release`` (a tag
    such as ``v0.6.2``; empty: the pinned one)."""
    return build.module_files(module(), MODULE, release or version())


def render(helm: Path) -> tuple[list[Obj], list[Obj]]:
    """LWS's CRDs and the rest of its chart, as helm renders them."""
    chart = module_dir() / "charts" / "lws"
    settings = {
        "image.manager.tag": version(),
        "image.manager.pullPolicy": "IfNotPresent",
        "enableCertManager": "true",
    }
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    command = [str(helm), "template", RELEASE, str(chart), "--namespace", NAMESPACE]
    result = subprocess.run(
        [*command, "--include-crds", *sets],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise UserError(f"helm template {chart} failed: {result.stderr.strip()}")
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    return crds, [o for o in objects if o["kind"] != "CustomResourceDefinition"]


def install(kubectl: Kubectl, pki: Pki, helm: Path) -> None:
    """Install LWS and wait until its webhooks admit a LeaderWorkerSet."""
    crds, objects = render(helm)
    kubectl.apply(_stream(certmanager.stand_in(crds, pki, NAMESPACE, inject_all=True)))
    for crd in crds:
        kubectl.wait_established(crd["metadata"]["name"])
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kubectl.apply(_stream([namespace]))
    objects = certmanager.stand_in(objects, pki, NAMESPACE, inject_all=True)
    kubectl.apply(_stream(objects), namespace=NAMESPACE)
    kubectl.rollout(NAMESPACE, "deployment/lws-controller-manager", READY_S)


def uninstall(kubectl: Kubectl, helm: Path) -> None:
    """Remove what ``install`` made; the CRDs go without waiting (their finalizer runs behind)."""
    crds, objects = render(helm)
    cluster_wide = [o for o in objects if "namespace" not in o.get("metadata", {})]
    for obj in cluster_wide:
        kubectl.run("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
    kubectl.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    names = [crd["metadata"]["name"] for crd in crds]
    kubectl.run("delete", "crd", *names, "--ignore-not-found", "--wait=false")


def _stream(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)
