"""KServe as the local cluster's API server and controller see it, release by release.

- ``releases``: the chart's table of KServe releases (``kserve-releases.yaml``), typed
- ``admission``: the InferenceService defaulter and validator, the (Cluster)ServingRuntime validator
- ``controller``: what the InferenceService reconciler makes (Deployments, Services, env, GPUs)
- ``status``: the InferenceService conditions it reports from the Deployments
- ``gotemplate``: the Go template KServe runs over the head container

``Cluster`` ties them together the way an API server with KServe installed does: it starts with the
ClusterServingRuntimes a default install of the release adds, admits every object a release applies
(runtimes before InferenceServices, as Helm's and Argo CD's ordering put them), remembers which Helm
release owns what, and reconciles every InferenceService. It keeps the Services KServe made
(``services_of``): KServe names the headless ones after the InferenceService's generation
(``generation``), and a newer generation does not delete the older ones (0.17+: they stay until the
InferenceService goes) except where the release's own cleanup does (0.15.x-0.16.0: every head
Service but the 3 newest, cluster-wide; 0.20.0: every one but ``<isvc>-predictor``). A release that
does not watch runtimes (0.15.x) reconciles an InferenceService with the runtime it last read until
an event of the InferenceService (or of what it owns: ``resync``) makes it read the runtime again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from multinode_llm.errors import UserError

from multinode_llm_local.k8s import Obj, find
from multinode_llm_local.kserve import admission, controller, releases, status
from multinode_llm_local.kserve.admission import GPU_TYPES, Denied
from multinode_llm_local.kserve.controller import (
    PVC_VOLUME,
    Reconciled,
    ReconcileError,
    Service,
    Workload,
)
from multinode_llm_local.kserve.releases import Release

__all__ = [
    "GPU_TYPES",
    "PVC_VOLUME",
    "RELEASE_ANNOTATION",
    "RUNTIME_KINDS",
    "Cluster",
    "Denied",
    "ReconcileError",
    "Reconciled",
    "Release",
    "Service",
    "Workload",
    "admission",
    "controller",
    "reconcile",
    "releases",
    "status",
]

RUNTIME_KINDS = ("ClusterServingRuntime", "ServingRuntime")
# The chart writes the KServe release it rendered for on its runtime (metadata, not spec: KServe
# copies neither into pods), so that the local cluster runs that release.
RELEASE_ANNOTATION = "multinode-llm/kserve-release"
HEAD_SERVICES_KEPT = 3  # cleanHeadSvc (0.15.x, 0.16.0)


@dataclass
class _Stored:
    obj: Obj
    owner: tuple[str, str] | None  # (Helm release, its namespace); None: KServe's own
    generation: int = 1
    # An InferenceService's runtime as the controller last read it, and whether the InferenceService
    # changed since (an event that makes a release that does not watch runtimes read it again).
    runtime_read: Obj | None = None
    changed: bool = True


@dataclass(frozen=True)
class _OwnedService:
    isvc: str  # the InferenceService of its namespace that owns it (ownerReferences)
    service: Service


@dataclass
class Cluster:
    """An API server with KServe ``release`` installed (webhooks and controller)."""

    release: Release
    objects: dict[tuple[str, str, str], _Stored] = field(default_factory=dict)
    # The Services KServe made that exist, by (namespace, name), oldest first (creation order).
    services: dict[tuple[str, str], _OwnedService] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for runtime in self.release.builtin_runtimes():
            self.objects[_key(runtime, "")] = _Stored(runtime, owner=None)

    def apply(self, objects: list[Obj], release: str, namespace: str) -> None:
        """``helm install``/``upgrade`` of ``objects`` as Helm release ``release``: each through
        KServe's webhooks (a denial raises ``Denied`` with KServe's message)."""
        ordered = [o for o in objects if o.get("kind") in RUNTIME_KINDS]
        ordered += [o for o in objects if o.get("kind") == "InferenceService"]
        for obj in ordered:
            self._admit(
                with_helm_ownership(obj, release, namespace), (release, namespace), namespace
            )

    def uninstall(self, release: str, namespace: str) -> None:
        """``helm uninstall``: the release's objects go, and with each InferenceService the
        Services KServe made for it (their ownerReferences name it); KServe's built-ins stay."""
        for key in [k for k, v in self.objects.items() if v.owner == (release, namespace)]:
            del self.objects[key]
            if key[0] == "InferenceService":
                for name in [s.name for s in self.services_of(key[1], key[2])]:
                    del self.services[(key[1], name)]

    def upgrade_kserve(self, release: Release) -> None:
        """Install another KServe release over the objects stored (webhooks change, data stays);
        a new controller starts by reading everything."""
        if release != self.release:
            self.release = release
            self.resync()

    def resync(self) -> None:
        """An event for every InferenceService (a Deployment's status changes, or the controller's
        periodic resync, 10 hours by default): the next reconcile reads each runtime again."""
        for stored in self.objects.values():
            stored.changed = True

    def isvcs(self) -> list[Obj]:
        return [s.obj for k, s in self.objects.items() if k[0] == "InferenceService"]

    def generation(self, namespace: str, name: str) -> int:
        """The InferenceService's ``metadata.generation``: one more on every change of its spec,
        none for metadata (the CRD has a status subresource); the headless Services' suffix."""
        return self.objects[("InferenceService", namespace, name)].generation

    def services_of(self, namespace: str, isvc: str) -> list[Service]:
        """The Services KServe made for InferenceService ``isvc`` that exist now, oldest first."""
        return [
            owned.service
            for (where, _), owned in self.services.items()
            if where == namespace and owned.isvc == isvc
        ]

    def reconcile(self) -> list[Reconciled]:
        """Every InferenceService's Deployments and Services; records status.deploymentMode."""
        results = []
        for key, stored in list(self.objects.items()):
            if key[0] != "InferenceService":
                continue
            isvc = stored.obj
            runtime = self._runtime_for(isvc)
            read = stored.runtime_read
            if (
                read is not None
                and not stored.changed
                and not self.release.controller.watches_runtimes
            ):
                runtime = read  # no event reached the controller since it last read the runtime
            stored.runtime_read, stored.changed = copy.deepcopy(runtime), False
            result = controller.reconcile(self.release, isvc, runtime, stored.generation)
            self._record_mode(isvc)
            self._reconcile_services(result)
            results.append(result)
        return [self._without_cleaned(r) for r in results]

    def _admit(self, obj: Obj, owner: tuple[str, str], namespace: str) -> None:
        kind = obj["kind"]
        if kind != "ClusterServingRuntime":
            obj["metadata"].setdefault("namespace", namespace)
        key = _key(obj, obj["metadata"].get("namespace", ""))
        stored = self.objects.get(key)
        if stored is not None and stored.owner != owner:
            raise UserError(_ownership_error(obj, stored.owner, owner))
        if kind in RUNTIME_KINDS:
            same_scope = [
                s.obj
                for k, s in self.objects.items()
                if k[0] == kind and (kind == "ClusterServingRuntime" or k[1] == key[1])
            ]
            admission.validate_runtime(self.release, obj, same_scope)
            self.objects[key] = _Stored(obj, owner)
            return
        defaulted = admission.default_isvc(self.release, obj)
        old = stored.obj if stored else None
        admission.validate_isvc(self.release, defaulted, old)
        generation = 1
        if stored is not None:
            defaulted["status"] = copy.deepcopy(stored.obj.get("status") or {})
            changed = defaulted.get("spec") != stored.obj.get("spec")
            generation = stored.generation + (1 if changed else 0)
        self.objects[key] = _Stored(defaulted, owner, generation)
        if stored is not None and stored.obj["metadata"] == defaulted["metadata"] and not changed:
            # an update that changes nothing sends the controller no event
            self.objects[key].runtime_read, self.objects[key].changed = stored.runtime_read, False

    def _runtime_for(self, isvc: Obj) -> Obj:
        model = isvc["spec"]["predictor"].get("model") or {}
        name = model.get("runtime")
        namespace = isvc["metadata"]["namespace"]
        for key in (("ServingRuntime", namespace, name), ("ClusterServingRuntime", "", name)):
            if key in self.objects:
                return self.objects[key].obj
        raise ReconcileError(
            f"No ServingRuntimes or ClusterServingRuntimes with the name: {name}: "
            "render the runtime with the InferenceService"
        )

    def _record_mode(self, isvc: Obj) -> None:
        """The controller writes the mode it used into status (0.15.1+), as it read it."""
        if self.release.version == "0.15.0":
            return
        mode = isvc["metadata"]["annotations"].get(admission.MODE, "")
        recorded = isvc.setdefault("status", {}).get("deploymentMode")
        if recorded and not (self.release.minor >= (0, 19)):
            return  # 0.15.1-0.18.1 keep what they recorded first
        if self.release.minor >= (0, 16):
            mode = admission.LEGACY_MODES.get(recorded or mode, recorded or mode)
        isvc["status"]["deploymentMode"] = mode

    def _reconcile_services(self, result: Reconciled) -> None:
        """``ServiceReconciler.Reconcile`` (reconcilers/service/service_reconciler.go): create the
        Services that are missing, update the others in place; never delete another generation's.
        Then the release's own deletions: 0.15.x-0.16.0's ``cleanHeadSvc`` right after, 0.20.0's
        ``reconcileCanaryDeployments`` cleanup (components/predictor.go) by label."""
        for service in result.services:  # an existing key keeps its place, a new one is newest
            owned = _OwnedService(result.isvc_name, service)
            self.services[(result.namespace, service.name)] = owned
        if self.release.controller.head_service_cleanup:
            heads = [
                key
                for key, owned in self.services.items()
                if owned.service.labels.get(controller.ROLE_LABEL) == "head"
            ]
            for key in heads[:-HEAD_SERVICES_KEPT]:  # every namespace, oldest first
                del self.services[key]
        if self.release.controller.deletes_workers:
            for service in self.services_of(result.namespace, result.isvc_name):
                if service.name != result.head.name:
                    del self.services[(result.namespace, service.name)]

    def _without_cleaned(self, result: Reconciled) -> Reconciled:
        """The result with every Service of it that no longer exists among ``deleted``."""
        gone = [
            s.name
            for s in result.services
            if (result.namespace, s.name) not in self.services and s.name not in result.deleted
        ]
        if not gone:
            return result
        return Reconciled(**{**result.__dict__, "deleted": [*result.deleted, *gone]})


def reconcile(
    objects: list[Obj],
    namespace: str = "default",
    generation: int = 1,
    release: Release | None = None,
    helm_release: str = "release",
) -> Reconciled:
    """The one multi-node InferenceService among ``objects``, admitted and reconciled, as Helm
    release ``helm_release`` applied them."""
    isvcs = find(objects, "InferenceService")
    if len(isvcs) != 1:
        raise UserError(
            f"the rendered chart holds {len(isvcs)} InferenceServices; the local cluster runs "
            "exactly one per release: check the values (is the chart's InferenceService enabled?)"
        )
    cluster = Cluster(release or releases.default())
    cluster.apply(objects, helm_release, namespace)
    stored = next(s for k, s in cluster.objects.items() if k[0] == "InferenceService")
    stored.generation = generation
    [result] = cluster.reconcile()
    return result


def with_helm_ownership(obj: Obj, release: str, namespace: str) -> Obj:
    """A copy of ``obj`` as Helm sends it: its ownership annotations and managed-by label added
    (helm's action/validate.go setMetadataVisitor, Helm 3 and 4). KServe copies an
    InferenceService's annotations into both pod templates, so they reach the pods too."""
    copied = copy.deepcopy(obj)
    metadata = copied.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), "app.kubernetes.io/managed-by": "Helm"}
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        "meta.helm.sh/release-name": release,
        "meta.helm.sh/release-namespace": namespace,
    }
    return copied


def _key(obj: Obj, namespace: str) -> tuple[str, str, str]:
    return obj["kind"], namespace, obj["metadata"]["name"]


def _ownership_error(obj: Obj, current: tuple[str, str] | None, wanted: tuple[str, str]) -> str:
    """Helm's refusal to take over an object another release (or nobody) owns."""
    kind, name = obj["kind"], obj["metadata"]["name"]
    where = obj["metadata"].get("namespace", "")
    if current is None:
        why = 'missing key "meta.helm.sh/release-name": must be set to ' + repr(wanted[0])
    elif current[0] != wanted[0]:
        why = (
            f'key "meta.helm.sh/release-name" must equal "{wanted[0]}": '
            f'current value is "{current[0]}"'
        )
    else:
        why = (
            f'key "meta.helm.sh/release-namespace" must equal "{wanted[1]}": '
            f'current value is "{current[1]}"'
        )
    return (
        "rendered manifests contain a resource that already exists. Unable to continue with "
        f'install: {kind} "{name}" in namespace "{where}" exists and cannot be imported into the '
        f"current release: invalid ownership metadata; annotation validation error: {why}"
    )
