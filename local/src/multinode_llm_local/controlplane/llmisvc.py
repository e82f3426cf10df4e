"""KServe's llmisvc controller on the real cluster: built from
``github.com/kserve/kserve/cmd/llmisvc`` at the release of the manager beside it (one module per
release, ``local/go/llmisvc-vX.Y.Z``), installed from that module's own Helm charts
(``charts/kserve-llmisvc-crd`` and ``charts/kserve-llmisvc-resources``), as KServe's install docs
do.

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
from typing import Any

from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build, certmanager, kserve
from multinode_llm_local.controlplane.kubectl import Kubectl
from multinode_llm_local.controlplane.pki import Pki
from multinode_llm_local.kserve import releases

Obj = dict[str, Any]
NAMESPACE = kserve.NAMESPACE  # the manager's: the charts' webhook Service names it
DEPLOYMENT = "llmisvc-controller-manager"
READY_S = 300.0


SOURCE = "github.com/kserve/kserve"
FAMILY = "llmisvc"  # local/go/llmisvc-vX.Y.Z
# The service webhook's view of a sample: admitted or refused, it answered.
PROBE: Obj = {
    "apiVersion": "serving.kserve.io/v1alpha2",
    "kind": "LLMInferenceService",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {"model": {"uri": "hf://probe/probe"}},
}


def module(kserve_version: str) -> build.Module | None:
    """The module that builds the controller at KServe ``kserve_version``, if one does."""
    return build.release_module(FAMILY, kserve_version)


def built_versions() -> list[str]:
    """The releases of kserve-releases.yaml whose llmisvc controller is built here, oldest first."""
    return [v for v in releases.versions() if module(v) is not None]


def version(built: build.Module) -> str:
    """The KServe release a module builds (``v0.19.0``)."""
    return built.required(SOURCE)


def render(helm: Path, built: build.Module) -> tuple[list[Obj], list[Obj]]:
    """The CRDs the controller adds to the manager's (its own, and the Inference Extension's,
    which its resources chart holds) and the rest of its charts, as helm renders them."""
    charts = build.module_files(built, SOURCE, version(built)) / "charts"
    managers = {crd["metadata"]["name"] for crd in kserve.template(helm, charts / "kserve-crd", [])}
    objects = kserve.template(helm, charts / "kserve-llmisvc-crd", [])
    values = [f"kserve.version={version(built)}", "kserve.createSharedResources=false"]
    flags = [flag for value in values for flag in ("--set", value)]
    objects += kserve.template(helm, charts / "kserve-llmisvc-resources", flags)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    added = [crd for crd in crds if crd["metadata"]["name"] not in managers]
    return added, [o for o in objects if o["kind"] != "CustomResourceDefinition"]


def install(kubectl: Kubectl, kserve_version: str, pki: Pki, helm: Path) -> None:
    """Install the controller at the manager's release; wait until it serves its webhooks."""
    built = required_module(kserve_version)
    crds, objects = render(helm, built)
    kubectl.apply(kserve.stream(certmanager.stand_in(crds, pki, NAMESPACE)))
    for crd in crds:
        kubectl.wait_established(crd["metadata"]["name"])
    kubectl.apply(kserve.stream(certmanager.stand_in(objects, pki, NAMESPACE)), namespace=NAMESPACE)
    kubectl.rollout(NAMESPACE, f"deployment/{DEPLOYMENT}", READY_S)
    # Rolled out is not yet serving: a service applied now would meet a refused connection.
    kserve.wait_webhooks(kubectl, PROBE, "KServe's llmisvc webhooks", READY_S)


def required_module(kserve_version: str) -> build.Module:
    """The controller's module at ``kserve_version``, or UserError naming the releases built."""
    built = module(kserve_version)
    if built is None:
        raise UserError(
            f"KServe's llmisvc controller is not built here at {kserve_version} (no "
            f"local/go/{FAMILY}-v{kserve_version}; LLMInferenceService v1alpha2 came with 0.17.0 "
            f"and the Go module proxy serves only some tags): start the cluster with "
            f"--kserve-version one of {', '.join(built_versions()) or 'none'}"
        )
    return built


def uninstall(kubectl: Kubectl, kserve_version: str, helm: Path) -> None:
    """Remove the controller's own objects; its CRDs go without waiting (their finalizer runs
    behind), the manager's namespace stays."""
    crds, objects = render(helm, required_module(kserve_version))
    ours = [o for o in objects if o["kind"] not in certmanager.KINDS]  # no such kinds here
    kubectl.run("delete", "--namespace", NAMESPACE, "--ignore-not-found", "-f", "-",
                stdin=kserve.stream(ours))  # fmt: skip
    names = [crd["metadata"]["name"] for crd in crds]
    kubectl.run("delete", "crd", *names, "--ignore-not-found", "--wait=false")
