"""KServe's llmisvc controller on the real cluster: built from
``github.com/kserve/kserve/cmd/llmisvc`` at the release of the manager beside it (one module per
release, ``local/go/llmisvc-vX.Y.Z``), installed from that module's own Helm charts
(``charts/kserve-llmisvc-crd`` and ``charts/kserve-llmisvc-resources``; ``llmisvc-crd`` and
``llmisvc-resources`` at 0.16.0), as KServe's install docs do.

It joins a cluster whose KServe manager runs the same release: the manager's
``inferenceservice-config`` ConfigMap, which the controller reads, stays the manager's (the
resources chart is rendered with ``kserve.createSharedResources=false`` where it has that switch,
from 0.17.0; 0.16.0's renders the ConfigMap, which is left out). 0.16.0's manager chart also holds
the two LLMInferenceService webhook configurations, pointed at the manager, which does not serve
them (the API server gets 404): the controller's chart's, of the same names, replace them, as
applying KServe's ``config/llmisvc`` after the manager does. ``certmanager.py`` issues the
webhook Service's certificate and puts its CA into the webhook configurations and the CRDs'
conversion webhooks. Installed on demand (``multinode-llm-local cluster llmisvc``, or
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
READY_S = 300.0


SOURCE = "github.com/kserve/kserve"
FAMILY = "llmisvc"  # local/go/llmisvc-vX.Y.Z


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
    which its resources chart holds) and the rest of its charts, as helm renders them, less the
    manager's ConfigMaps."""
    at = version(built)
    charts = build.module_files(built, SOURCE, at) / "charts"
    managers = {crd["metadata"]["name"] for crd in kserve.template(helm, charts / "kserve-crd", [])}
    prefix = "kserve-" if (charts / "kserve-llmisvc-crd").is_dir() else ""  # none at 0.16.0
    objects = kserve.template(helm, charts / f"{prefix}llmisvc-crd", [])
    resources = charts / f"{prefix}llmisvc-resources"
    values = [f"kserve.version={at}"]
    if "createSharedResources" in (resources / "values.yaml").read_text():
        values.append("kserve.createSharedResources=false")
    flags = [flag for value in values for flag in ("--set", value)]
    # the manager's ConfigMaps, from its own chart in the same module
    kept = {
        o["metadata"]["name"]
        for o in kserve.template(helm, charts / "kserve-resources", [])
        if o["kind"] == "ConfigMap"
    }
    objects += [
        o
        for o in kserve.template(helm, resources, flags)
        if not (o["kind"] == "ConfigMap" and o["metadata"]["name"] in kept)
    ]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    added = [crd for crd in crds if crd["metadata"]["name"] not in managers]
    return added, [o for o in objects if o["kind"] != "CustomResourceDefinition"]


def deployment(objects: list[Obj]) -> str:
    """The controller's Deployment among its chart's objects (its name differs by release)."""
    [name] = [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"]
    return str(name)


def probe(kserve_version: str) -> Obj:
    """A sample service in the release's API, for its webhook: admitted or refused, it answered."""
    return {
        "apiVersion": releases.llm_inference_service(kserve_version).api_version,
        "kind": "LLMInferenceService",
        "metadata": {"name": "webhook-probe", "namespace": "default"},
        "spec": {"model": {"uri": "hf://probe/probe"}},
    }


def install(kubectl: Kubectl, kserve_version: str, pki: Pki, helm: Path) -> None:
    """Install the controller at the manager's release; wait until it serves its webhooks."""
    built = required_module(kserve_version)
    crds, objects = render(helm, built)
    kubectl.apply(kserve.stream(certmanager.stand_in(crds, pki, NAMESPACE)))
    for crd in crds:
        kubectl.wait_established(crd["metadata"]["name"])
    # KServe's own presets go through the controller's webhook: applied once it serves (0.16.0's
    # chart holds them beside the controller; later ones leave them out with the shared resources)
    presets = [o for o in objects if o["kind"] == "LLMInferenceServiceConfig"]
    rest = [o for o in objects if o["kind"] != "LLMInferenceServiceConfig"]
    kubectl.apply(kserve.stream(certmanager.stand_in(rest, pki, NAMESPACE)), namespace=NAMESPACE)
    kubectl.rollout(NAMESPACE, f"deployment/{deployment(objects)}", READY_S)
    # Rolled out is not yet serving: a service applied now would meet a refused connection.
    kserve.wait_webhooks(kubectl, probe(kserve_version), "KServe's llmisvc webhooks", READY_S)
    if presets:
        kubectl.apply(kserve.stream(presets), namespace=NAMESPACE)


def required_module(kserve_version: str) -> build.Module:
    """The controller's module at ``kserve_version``, or UserError naming the releases built."""
    built = module(kserve_version)
    if built is None:
        raise UserError(
            f"KServe's llmisvc controller is not built here at {kserve_version} (no "
            f"local/go/{FAMILY}-v{kserve_version}; LLMInferenceService came with 0.16.0 "
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
