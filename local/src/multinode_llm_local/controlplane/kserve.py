"""Real KServe on the real cluster: the manager built from ``github.com/kserve/kserve`` at a release
tag, installed from that same module's own Helm charts.

The release's module (``local/go/kserve-vX.Y.Z``; the Go module proxy serves only some tags,
``local/go/unserved.yaml`` says which it refused) holds the manager's source and the charts
KServe's install docs use: ``charts/kserve-crd`` (the CRDs), ``charts/kserve-resources`` (RBAC,
the ``inferenceservice-config`` ConfigMap, the webhook configurations, the manager's Deployment and
Service, from 0.17 without the built-in runtimes) and, from 0.17, ``charts/kserve-runtime-configs``
(the ClusterServingRuntimes a default install has). They are rendered with real helm in the
deployment mode the release calls raw (RawDeployment, or Standard from 0.16 on, as
``kserve-releases.yaml`` says) and applied with real kubectl.

One thing stands in for what a real cluster would run: cert-manager (``certmanager.py``), which
KServe's charts ask for the webhook Service's certificate and its CA.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build, certmanager
from multinode_llm_local.controlplane.kubectl import Kubectl
from multinode_llm_local.controlplane.pki import Pki
from multinode_llm_local.kserve import releases

Obj = dict[str, Any]
FAMILY = "kserve"  # its manager's modules: local/go/kserve-vX.Y.Z
NAMESPACE = "kserve"
READY_S = 300.0


@dataclass(frozen=True)
class Release:
    """The KServe release a real cluster runs, and the module its manager is built from."""

    version: str  # "0.19.0"
    module: build.Module
    deployment_mode: str  # what the release calls its raw mode: RawDeployment or Standard

    @property
    def source(self) -> str:
        return f"module github.com/kserve/kserve@v{self.version}"


def built_versions() -> list[str]:
    """The releases of kserve-releases.yaml whose manager is built here, oldest first."""
    return [v for v in releases.versions() if build.release_module(FAMILY, v) is not None]


def unserved() -> dict[str, str]:
    """Release -> the proxy's answer, for the releases whose module it refused."""
    path = build.go_root() / "unserved.yaml"
    found = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    return {str(k): "\n".join(v) if isinstance(v, list) else str(v) for k, v in found.items()}


def resolve(asked: str) -> Release:
    """The release ``asked`` names (as ``kserve.version`` does; empty: the chart's default)."""
    release = releases.resolve(asked) if asked else releases.default()
    module = build.release_module(FAMILY, release.version)
    if module is None:
        refused = unserved().get(release.version, "no module folder in local/go")
        raise UserError(
            f"KServe {release.version} cannot run for real here: the Go module proxy does not "
            f"serve github.com/kserve/kserve@v{release.version} ({refused.splitlines()[0]}); "
            f"releases built here: {', '.join(built_versions())} (--kserve-version)"
        )
    return Release(release.version, module, release.deployment_mode)


def module_dir(release: Release) -> Path:
    """The module's files in Go's module cache (downloaded by its build)."""
    return build.module_files(release.module, "github.com/kserve/kserve", f"v{release.version}")


def render(release: Release, helm: Path) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """KServe's CRDs, its resources and its built-in runtimes, rendered by helm from its charts."""
    charts = module_dir(release) / "charts"
    crds = template(helm, charts / "kserve-crd", [])
    mode = f"kserve.controller.deploymentMode={release.deployment_mode}"
    resources = template(helm, charts / "kserve-resources", ["--set", mode])
    runtimes = [o for o in resources if o["kind"] == "ClusterServingRuntime"]
    resources = [o for o in resources if o["kind"] != "ClusterServingRuntime"]
    configs = charts / "kserve-runtime-configs"
    if configs.is_dir():
        runtimes += [
            o
            for o in template(
                helm,
                configs,
                [
                    "--set",
                    f"kserve.version=v{release.version}",
                    "--set",
                    "kserve.servingruntime.enabled=true",
                ],
            )
            if o["kind"] == "ClusterServingRuntime"
        ]
    return crds, resources, runtimes


def install(
    kubectl: Kubectl, release: Release, pki: Pki, helm: Path, progress: Callable[[str], None]
) -> None:
    """Install the release and wait until its manager serves its webhooks."""
    crds, resources, runtimes = render(release, helm)
    kubectl.apply(stream(crds))
    for crd in crds:
        kubectl.wait_for("crd", crd["metadata"]["name"], "condition=Established", 60)
    objects = certmanager.stand_in(resources, pki, NAMESPACE)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kubectl.apply(stream([namespace]))
    # Some releases' charts give their namespaced objects no namespace (0.15.0's ServiceAccount):
    # helm install puts those into the release's namespace, and so does this.
    kubectl.apply(stream(objects), namespace=NAMESPACE)
    kubectl.rollout(NAMESPACE, "deployment/kserve-controller-manager", READY_S)
    wait_webhooks(kubectl, PROBE, "KServe's webhooks", READY_S)
    if runtimes:
        progress(f"KServe's manager serves; adding its {len(runtimes)} built-in runtimes")
        kubectl.apply(stream(runtimes))


def template(helm: Path, chart: Path, args: list[str]) -> list[Obj]:
    result = subprocess.run(
        [str(helm), "template", "kserve", str(chart), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise UserError(f"helm template {chart} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# A sample InferenceService for the webhooks to judge: admitted or refused, they answered.
PROBE: Obj = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {
        "predictor": {
            "model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://probe/model"}
        }
    },
}


def wait_webhooks(kubectl: Kubectl, probe: Obj, what: str, timeout: float) -> None:
    """Until the webhooks for ``probe``'s kind answer: a server-side dry run goes through them."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            kubectl.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe))
            return
        except UserError as error:
            last = str(error)
            if "webhook" not in last and "connection refused" not in last:
                return  # the webhooks answered, and refused the probe: they serve
        time.sleep(1)
    raise UserError(f"{what} did not answer within {timeout:.0f} s: {last}")


def stream(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)
