"""A model of Helm's release actions (install, upgrade, rollback, uninstall) run against the FAKE
cluster of cluster.py: what Helm does with the objects of a real render, read from its source.

The suite runs helm3 v3.17.3 and helm4 v4.3.1 (hack/install-tools.sh). Citations are to
github.com/helm/helm at v3.17.3 and at v4.2.4, the newest v4 tag of the mirror read (v4.3.1 is not
in it); main at e9b85e4 changes nothing below but adds an ownership check before uninstall deletes,
which a release's own objects pass. Where v3 and v4 differ for these findings, ``major`` decides.

- Which documents are hooks: pkg/releaseutil/manifest_sorter.go (v4:
  pkg/release/v1/util/manifest_sorter.go) ``SortManifests``/``manifestFile.sort``: a document with
  a ``helm.sh/hook`` annotation is a hook and never part of the release manifest; one naming an
  unknown event is dropped ("skipping unknown hook"); ``helm.sh/hook-weight`` (Atoi, else 0);
  ``helm.sh/hook-delete-policy`` (comma-separated). Hooks and manifests are ordered by kind
  (kind_sorter.go ``InstallOrder``, ``sortHooksByKind``).
- Running hooks: pkg/action/hooks.go ``execHook`` (v4 ``execHookWithDelayedShutdown``): the hooks of
  one event, stably sorted by weight then name (``hookByWeight``); no delete policy means
  ``before-hook-creation`` (``hookSetDeletePolicy`` in v4), which deletes the live object of that
  name whatever it holds (``deleteHookByPolicy``: it never reads ``helm.sh/resource-policy``);
  then Create, then ``WatchUntilReady``, which waits for Jobs and Pods only (v3 pkg/kube/client.go
  ``watchUntilReady``; v4 pkg/kube/statuswait.go, ``alwaysReady`` for other kinds); a failed hook is
  deleted under ``hook-failed`` (v4 also deletes the event's earlier ``hook-succeeded`` hooks), and
  after all succeed each ``hook-succeeded`` one is. Hooks get no ownership metadata.
- Install: pkg/action/install.go ``RunWithContext``/``performInstall``: ``availableName`` (a name
  with history is refused; uninstall purges it); ``setMetadataVisitor`` (validate.go) stamps the
  manifest's objects with ``app.kubernetes.io/managed-by: Helm`` and ``meta.helm.sh/release-name``
  / ``-namespace``; ``existingResourceConflict`` (validate.go, ``checkOwnership``) refuses a live
  object without this release's stamp and adopts one with it (``--take-ownership``:
  ``requireAdoption``, no check); pre-install hooks; Create, or ``Update(toBeAdopted, resources)``
  when some are adopted; post-install hooks.
- Upgrade: pkg/action/upgrade.go ``performUpgrade``/``releasingUpgrade``: the ownership check for
  objects new to the manifest, pre-upgrade hooks, ``KubeClient.Update(current, target)``,
  post-upgrade hooks.
- ``Update``: pkg/kube/client.go ``Client.Update``: creates what is missing, updates what exists
  (v3: an object that exists but is not in the original is an error, "no %s with the name %q
  found"; v4: the live object is the baseline), stops on update errors, then deletes each object
  of the original that the target lacks unless the LIVE object says ``helm.sh/resource-policy:
  keep`` (pkg/kube/resource_policy.go).
- Rollback: pkg/action/rollback.go ``prepareRollback``/``performRollback``: a new revision with the
  target revision's manifest and hooks, pre-rollback hooks, ``Update(current, target)``,
  post-rollback hooks.
- Uninstall: pkg/action/uninstall.go ``Run``/``deleteRelease``: pre-delete hooks, deletes the
  manifest's objects except those whose RENDERED annotation is ``keep`` (pkg/action/
  resource_policy.go ``filterManifestsToKeep``: another value of the annotation keeps the object out
  of both lists), post-delete hooks, purges the history. Hook objects are not in the manifest and
  are never deleted by an uninstall.

Left out: ``lookup`` (the renders come from ``helm template``, where it finds nothing: the chart's
shrink and class-change refusals are not exercised), ``--wait``/``--atomic``/``--cleanup-on-fail``/
``--replace``/``--keep-history``/``--force``, CRDs, chart dependencies, the release storage driver,
the API server's dry runs, test hooks (``helm test``), deletion propagation and ordering.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from tests.lifecycle.cluster import Doc, FakeCluster, Key, RefusedError, job_failed, job_finished

HOOK = "helm.sh/hook"
HOOK_WEIGHT = "helm.sh/hook-weight"
HOOK_DELETE_POLICY = "helm.sh/hook-delete-policy"
RESOURCE_POLICY = "helm.sh/resource-policy"
MANAGED_BY, RELEASE_NAME, RELEASE_NAMESPACE = (
    "app.kubernetes.io/managed-by",
    "meta.helm.sh/release-name",
    "meta.helm.sh/release-namespace",
)
EVENTS = frozenset(
    {
        "pre-install",
        "post-install",
        "pre-delete",
        "post-delete",
        "pre-upgrade",
        "post-upgrade",
        "pre-rollback",
        "post-rollback",
        "test",
    }
)
# pkg/releaseutil/kind_sorter.go InstallOrder (v3.17.3; the same in v4.2.4).
INSTALL_ORDER = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
)


class HelmError(Exception):
    """What the helm command would print after ``Error:``."""


@dataclass(frozen=True)
class Hook:
    name: str
    kind: str
    doc: Doc
    events: tuple[str, ...]
    weight: int
    delete_policies: tuple[str, ...]


@dataclass
class Release:
    name: str
    namespace: str
    revision: int
    manifest: list[Doc]
    hooks: list[Hook]
    status: str
    description: str = ""
    kept: list[Key] = field(default_factory=list)


def _annotations(doc: Doc) -> dict[str, str]:
    found: dict[str, str] = (doc.get("metadata") or {}).get("annotations") or {}
    return found


def _kind_rank(kind: str) -> tuple[int, str]:
    """lessByKind: known kinds in InstallOrder, unknown ones last and alphabetically."""
    if kind in INSTALL_ORDER:
        return (INSTALL_ORDER.index(kind), "")
    return (len(INSTALL_ORDER), kind)


def sort_manifests(docs: list[Doc]) -> tuple[list[Hook], list[Doc]]:
    """SortManifests: (hooks, manifest), each ordered by kind."""
    hooks: list[Hook] = []
    manifest: list[Doc] = []
    for doc in docs:
        annotations = _annotations(doc)
        if HOOK not in annotations:
            manifest.append(doc)
            continue
        events = tuple(e.strip().lower() for e in annotations[HOOK].split(","))
        if any(e not in EVENTS for e in events):
            continue  # "info: skipping unknown hook"
        try:
            weight = int(annotations.get(HOOK_WEIGHT, ""))
        except ValueError:
            weight = 0
        policies = tuple(
            p.strip().lower() for p in annotations.get(HOOK_DELETE_POLICY, "").split(",") if p
        )
        name = str(doc["metadata"]["name"])
        hooks.append(Hook(name, str(doc["kind"]), doc, events, weight, policies))
    hooks.sort(key=lambda h: _kind_rank(h.kind))
    manifest.sort(key=lambda d: _kind_rank(str(d["kind"])))
    return hooks, manifest


def _stamped(doc: Doc, release: str, namespace: str) -> Doc:
    """setMetadataVisitor(name, namespace, force=true)."""
    stamped = copy.deepcopy(doc)
    meta = stamped.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY: "Helm"}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        RELEASE_NAME: release,
        RELEASE_NAMESPACE: namespace,
    }
    return stamped


def check_ownership(labels: dict[str, str], annotations: dict[str, str], rel: Release) -> str:
    """validate.go checkOwnership: "" when the object may be adopted, else Helm's reasons."""
    errors = []
    for where, values, key, want in (
        ("label", labels, MANAGED_BY, "Helm"),
        ("annotation", annotations, RELEASE_NAME, rel.name),
        ("annotation", annotations, RELEASE_NAMESPACE, rel.namespace),
    ):
        if key not in values:
            errors.append(f'{where} validation error: missing key "{key}": must be set to "{want}"')
        elif values[key] != want:
            errors.append(
                f'{where} validation error: key "{key}" must equal "{want}": '
                f'current value is "{values[key]}"'
            )
    return "; ".join(["invalid ownership metadata", *errors]) if errors else ""


class Helm:
    """helm, as one user's client of the fake cluster (release history included)."""

    def __init__(self, cluster: FakeCluster, major: str = "helm4") -> None:
        assert major in ("helm3", "helm4"), major
        self.cluster = cluster
        self.major = major
        self.history: dict[tuple[str, str], list[Release]] = {}

    # --- actions --------------------------------------------------------------------------------

    def install(
        self, name: str, namespace: str, docs: list[Doc], *, take_ownership: bool = False
    ) -> Release:
        if self.history.get((namespace, name)):
            raise HelmError("INSTALLATION FAILED: cannot re-use a name that is still in use")
        hooks, manifest = sort_manifests(docs)
        rel = Release(name, namespace, 1, manifest, hooks, "pending-install")
        resources = [_stamped(d, name, namespace) for d in manifest]
        try:
            adopted = self._adoptable(resources, rel, take_ownership)
        except HelmError as err:
            raise HelmError(f"INSTALLATION FAILED: Unable to continue with install: {err}") from err
        self.history[(namespace, name)] = [rel]
        try:
            self._exec_hooks(rel, "pre-install")
            if adopted:
                self._update(adopted, resources, namespace)
            else:
                for doc in resources:
                    self.cluster.create(doc, namespace)
            self._exec_hooks(rel, "post-install")
        except (HelmError, RefusedError) as err:
            rel.status = "failed"
            raise HelmError(f"INSTALLATION FAILED: {err}") from err
        rel.status = "deployed"
        return rel

    def upgrade(
        self, name: str, namespace: str, docs: list[Doc], *, take_ownership: bool = False
    ) -> Release:
        history = self.history.get((namespace, name))
        if not history:
            raise HelmError(f'UPGRADE FAILED: "{name}" has no deployed releases')
        deployed = [r for r in history if r.status == "deployed"]
        current = deployed[-1] if deployed else history[-1]
        hooks, manifest = sort_manifests(docs)
        rel = Release(name, namespace, history[-1].revision + 1, manifest, hooks, "pending-upgrade")
        target = [_stamped(d, name, namespace) for d in manifest]
        known = {Key.of(d, namespace) for d in current.manifest}
        new = [d for d in target if Key.of(d, namespace) not in known]
        try:
            adopted = self._adoptable(new, rel, take_ownership)
        except HelmError as err:
            raise HelmError(f"UPGRADE FAILED: Unable to continue with update: {err}") from err
        history.append(rel)
        try:
            self._exec_hooks(rel, "pre-upgrade")
            self._update(current.manifest + adopted, target, namespace)
            self._exec_hooks(rel, "post-upgrade")
        except (HelmError, RefusedError) as err:
            rel.status = "failed"
            raise HelmError(f"UPGRADE FAILED: {err}") from err
        current.status = "superseded"
        rel.status = "deployed"
        return rel

    def rollback(self, name: str, namespace: str, revision: int = 0) -> Release:
        history = self.history.get((namespace, name))
        if not history:
            raise HelmError(f'release: not found: "{name}"')
        current = history[-1]
        wanted = revision or current.revision - 1
        [previous] = [r for r in history if r.revision == wanted]
        rel = Release(
            name,
            namespace,
            current.revision + 1,
            copy.deepcopy(previous.manifest),
            list(previous.hooks),
            "pending-rollback",
            f"Rollback to {wanted}",
        )
        history.append(rel)
        try:
            self._exec_hooks(rel, "pre-rollback")
            target = [_stamped(d, name, namespace) for d in rel.manifest]
            self._update(current.manifest, target, namespace)
            self._exec_hooks(rel, "post-rollback")
        except (HelmError, RefusedError) as err:
            rel.status = "failed"
            raise HelmError(f"Rollback {name!r} failed: {err}") from err
        current.status = "superseded"
        rel.status = "deployed"
        return rel

    def uninstall(self, name: str, namespace: str) -> Release:
        history = self.history.get((namespace, name))
        if not history:
            raise HelmError(f"uninstall: Release not loaded: {name}: release: not found")
        rel = history[-1]
        self._exec_hooks(rel, "pre-delete")
        for doc in rel.manifest:
            policy = _annotations(doc).get(RESOURCE_POLICY)
            if policy is None:
                self.cluster.delete(Key.of(doc, namespace))
            elif policy.strip().lower() == "keep":
                rel.kept.append(Key.of(doc, namespace))
        self._exec_hooks(rel, "post-delete")
        rel.status = "uninstalled"
        del self.history[(namespace, name)]
        return rel

    # --- helpers --------------------------------------------------------------------------------

    def _adoptable(self, docs: list[Doc], rel: Release, take_ownership: bool) -> list[Doc]:
        """existingResourceConflict (or requireAdoption): the live ones among ``docs``."""
        adopted = []
        for doc in docs:
            key = Key.of(doc, rel.namespace)
            live = self.cluster.get(key)
            if live is None:
                continue
            if not take_ownership:
                reason = check_ownership(live.labels, live.annotations, rel)
                if reason:
                    raise HelmError(
                        f'{key.kind} "{key.name}" in namespace "{key.namespace}" exists and '
                        f"cannot be imported into the current release: {reason}"
                    )
            adopted.append(doc)
        return adopted

    def _update(self, original: list[Doc], target: list[Doc], namespace: str) -> None:
        """pkg/kube/client.go Client.Update."""
        known = {Key.of(d, namespace) for d in original}
        errors = []
        for doc in target:
            key = Key.of(doc, namespace)
            if self.cluster.get(key) is None:
                self.cluster.create(doc, namespace)  # "failed to create resource" stops Update
                continue
            if key not in known and self.major == "helm3":
                raise HelmError(f'no {key.kind} with the name "{key.name}" found')
            try:
                self.cluster.update(doc, namespace)
            except RefusedError as err:
                errors.append(f'cannot patch "{key.name}" with kind {key.kind}: {err}')
        if errors:
            raise HelmError(" && ".join(errors))
        wanted = {Key.of(d, namespace) for d in target}
        for doc in original:
            key = Key.of(doc, namespace)
            live = self.cluster.get(key)
            if key in wanted or live is None:
                continue
            if live.annotations.get(RESOURCE_POLICY) == "keep":
                continue
            self.cluster.delete(key)

    def _exec_hooks(self, rel: Release, event: str) -> None:
        executing = sorted(
            (h for h in rel.hooks if event in h.events), key=lambda h: (h.weight, h.name)
        )
        for i, hook in enumerate(executing):
            policies = hook.delete_policies or ("before-hook-creation",)
            key = Key.of(hook.doc, rel.namespace)
            if "before-hook-creation" in policies and hook.kind != "CustomResourceDefinition":
                self.cluster.delete(key)
            try:
                self.cluster.create(hook.doc, rel.namespace)
            except RefusedError as err:
                raise HelmError(f"warning: Hook {event} {hook.name} failed: {err}") from err
            failure = self._watch_until_ready(key)
            if failure:
                if "hook-failed" in policies:
                    self.cluster.delete(key)
                if self.major == "helm4":
                    for earlier in executing[:i]:
                        if "hook-succeeded" in (earlier.delete_policies or ()):
                            self.cluster.delete(Key.of(earlier.doc, rel.namespace))
                raise HelmError(f"{event} hooks failed: {failure}")
        for hook in reversed(executing):
            if "hook-succeeded" in (hook.delete_policies or ()):
                self.cluster.delete(Key.of(hook.doc, rel.namespace))

    def _watch_until_ready(self, key: Key) -> str:
        """WatchUntilReady for one hook: "" when ready, else why not."""
        if key.kind not in ("Job", "Pod"):
            return ""
        self.cluster.settle()
        live = self.cluster.get(key)
        if live is None or key.kind == "Pod":
            return ""
        if job_failed(live):
            return f"job {key.name} failed: BackoffLimitExceeded"
        if not job_finished(live):
            return f"timed out waiting for the condition ({key}: {live.waiting or 'running'})"
        return ""
