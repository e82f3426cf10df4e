"""KServe's llmisvc controller on the real cluster: built from
``github.com/kserve/kserve/cmd/llmisvc`` at the release ``local/go/llmisvc`` pins, installed from
that module's own Helm charts (``charts/kserve-llmisvc-crd`` and
``charts/kserve-llmisvc-resources``), as KServe's install docs do.

It joins a cluster whose KServe manager runs the same release: the resources chart is rendered
with ``kserve.createSharedResources=false``, so the manager's ``inferenceservice-config``
ConfigMap, which the controller reads, stays the manager's. ``certmanager.py`` issues the webhook
Service's certificate and puts its CA into the webhook configurations and the CRDs' conversion
webhooks. Installed on demand (``multinode-llm-local cluster llmisvc``, or
``cluster.llm_inference_service``), after LeaderWorkerSet: the controller watches LeaderWorkerSets
only where their CRD exists when it starts (``SetupWithManager`` asks ``IsCrdAvailable``,
``pkg/controller/v1alpha2/llmisvc/controller.go`` at v0.19.0). No Gateway API or scheduler
runs: a service without ``spec.router`` needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build, certmanager, kserve
from multinode_llm_local.controlplane.pki import Pki
from multinode_llm_local.kserve import llmisvc

if TYPE_CHECKING:
    from multinode_llm_local.controlplane.cluster import Kubectl

Obj = dict[str, Any]
NAMESPACE = kserve.NAMESPACE  # the manager's: the charts' webhook Service names it
DEPLOYMENT = "llmisvc-controller-manager"
READY_S = 300.0


SOURCE = "github.com/kserve/kserve"


def version() -> str:
    """The KServe release of the controller (``v0.19.0``)."""
    return f"v{llmisvc.release()}"


def render(helm: Path) -> tuple[list[Obj], list[Obj]]:
    """The CRDs the controller adds to the manager's (its own, and the Inference Extension's,
    which its resources chart holds) and the rest of its charts, as helm renders them."""
    charts = build.module_files(llmisvc.module(), SOURCE, version()) / "charts"
    managers = {crd["metadata"]["name"] for crd in kserve.template(helm, charts / "kserve-crd", [])}
    objects = kserve.template(helm, charts / "kserve-llmisvc-crd", [])
    objects += kserve.template(
        helm,
        charts / "kserve-llmisvc-resources",
        ["--set", f"kserve.version={version()}", "--set", "kserve.createSharedResources=false"],
    )
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    added = [crd for crd in crds if crd["metadata"]["name"] not in managers]
    return added, [o for o in objects if o["kind"] != "CustomResourceDefinition"]


def install(kubectl: Kubectl, kserve_version: str, pki: Pki, helm: Path) -> None:
    """Install the controller and wait until it serves its webhooks."""
    if f"v{kserve_version}" != version():
        raise UserError(
            f"KServe's llmisvc controller is built here at {version()} only (local/go/llmisvc), "
            f"and reads the configuration of the manager beside it, which runs {kserve_version}: "
            f"start the cluster with --kserve-version {version().lstrip('v')}"
        )
    crds, objects = render(helm)
    kubectl.apply(kserve.stream(certmanager.stand_in(crds, pki, NAMESPACE)))
    for crd in crds:
        kubectl.wait_established(crd["metadata"]["name"])
    kubectl.apply(kserve.stream(certmanager.stand_in(objects, pki, NAMESPACE)), namespace=NAMESPACE)
    kubectl.rollout(NAMESPACE, f"deployment/{DEPLOYMENT}", READY_S)


def uninstall(kubectl: Kubectl, helm: Path) -> None:
    """Remove the controller's own objects; its CRDs go without waiting (their finalizer runs
    behind), the manager's namespace stays."""
    crds, objects = render(helm)
    ours = [o for o in objects if o["kind"] not in certmanager.KINDS]  # no such kinds here
    kubectl.run("delete", "--namespace", NAMESPACE, "--ignore-not-found", "-f", "-",
                stdin=kserve.stream(ours))  # fmt: skip
    names = [crd["metadata"]["name"] for crd in crds]
    kubectl.run("delete", "crd", *names, "--ignore-not-found", "--wait=false")
