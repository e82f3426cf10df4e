"""A model of Argo CD's sync and app deletion, run against the FAKE cluster of cluster.py: what Argo
CD does with the objects of a real render (Argo CD renders with ``helm template``), read from its
source at github.com/argoproj/argo-cd v3.5.0, whose gitops-engine is in-tree (gitops-engine/pkg/...;
Argo CD 3.0 to 3.4 vendor github.com/argoproj/gitops-engine, the same code for what follows).

The sync (gitops-engine/pkg/sync/sync_context.go ``syncContext.Sync``) is a loop: Argo CD calls
``Sync`` again and again, re-reading the live state between calls, until the operation ends. Each
call, as modelled by ``ArgoCD._step``:

1. ``getSyncTasks``: one task per rendered object and phase (``syncPhases`` in sync_phase.go: a
   non-hook object is in ``Sync``; a hook in the phases its ``argocd.argoproj.io/hook`` types name,
   else the ones its ``helm.sh/hook`` events map to (hook/helm/type.go: pre-install and
   pre-upgrade -> PreSync, post-* -> PostSync; ``test`` maps to none, so Argo CD never runs a Helm
   test); live objects no longer rendered become prune tasks, but a live hook never does ("Skipping
   hook"). ``hook.IsHook`` (hook/hook.go): an ``argocd.argoproj.io/hook`` annotation, else a
   ``helm.sh/hook`` one other than crd-install. Tasks sort by phase (PreSync, Sync, PostSync), wave
   (``syncwaves.Wave``: ``argocd.argoproj.io/sync-wave``, else ``helm.sh/hook-weight``, else 0),
   kind (sync_tasks.go ``kindOrder``) and name; earlier results (``syncRes``) are read back.
   Prune tasks first have their waves reversed (``reverse_prune_waves``), so that what was
   created last is pruned first: a real Argo CD run showed this (tests/cluster/test_argocd.py).
   The swap is made afresh on each call, over the prune tasks whose objects are still there: once
   the last wave's prunes are done, the rest fall back to their own waves. A live object with
   ``PruneLast=true`` in ``argocd.argoproj.io/sync-options`` is pruned one wave past the Sync
   phase's last (``prune_last``).
2. Running tasks are brought up to date from health (health/health.go ``GetResourceHealth``;
   health_pvc.go: a Bound claim is Healthy, Pending Progressing; health_job.go: Complete Healthy,
   Failed Degraded, else Progressing): a hook by ``getOperationPhase`` (Healthy -> Succeeded,
   Degraded/Unknown -> Failed, Progressing -> Running; no health check -> Succeeded), a resource by
   its health (none -> Succeeded). While any task runs in a multi-step sync, or any hook runs, wait.
3. ``hooksPendingDeletionFailed``: every completed hook with a live object and delete policy
   ``HookFailed`` (``DeletePolicies`` in hook/delete_policy.go: the Argo CD annotation's values plus
   the Helm annotation's, mapped; none means ``BeforeHookCreation``). If any task completed
   unsuccessfully, those hooks are deleted (``deleteHooks``) and the sync fails
   (``executeSyncFailPhase``; no SyncFail hooks here).
4. Else the first pending phase and wave run (``runTasks``): prune tasks first (``pruneObject``: not
   without ``prune``, never with ``Prune=false`` in ``argocd.argoproj.io/sync-options``), then
   hooks with ``BeforeHookCreation`` and a live object are deleted (the step ends; the next one
   creates them), then the rest is applied (``applyObject``): Synced, hence Running; a refused apply
   fails the sync, and with no hook still running, the HookFailed hooks are deleted. The last wave
   succeeds as soon as it is applied when it holds no hook ("EVEN if those objects subsequently
   degrade"); ``HookSucceeded`` hooks are deleted when the sync succeeds.

Deleting an Application with cascade (controller/appcontroller.go ``finalizeApplicationDeletion``,
``shouldBeDeleted``) deletes each live object the app tracks except CRDs and objects with
``Delete=false`` in ``argocd.argoproj.io/sync-options`` or ``helm.sh/resource-policy: keep``.
Tracking is by annotation, the default (util/settings/settings.go ``GetTrackingMethod``):
``argocd.argoproj.io/tracking-id: APP:GROUP/KIND:NAMESPACE/NAME`` (util/argo/resource_tracking.go
``BuildAppInstanceValue``); a live object one app renders but another app's id tracks gives a
``SharedResourceWarning`` (controller/state.go ``CompareAppState``), and each sync takes it over.

Left out: the client-side dry run of the first step (it validates YAML only), SyncFail/PostDelete/
PreDelete hooks, the hook finalizer, generateName hooks, the wait for a pruned object that is
still being deleted (``prunedTasksPendingDelete``: the fake deletes at once, so a claim a group
still mounts goes here where a real sync waits for it, for ever if the group moves off it only in
a later wave, as tests/cluster/test_argocd.py found), Replace/Force/ServerSideApply options,
ApplyOutOfSyncOnly, namespace auto-creation and CRD ordering (``adjustDeps``), deletion
confirmation, retries, self-heal and auto-sync timing (syncs run when a
test says), health of kinds other than claims and Jobs (the InferenceService's Lua check included:
tests/chart/test_argocd_health.py has it; here it has none), and foreground deletion.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from tests.lifecycle.cluster import Doc, FakeCluster, Key, Live, RefusedError

HOOK = "argocd.argoproj.io/hook"
HOOK_DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
TRACKING_ID = "argocd.argoproj.io/tracking-id"
HELM_HOOK, HELM_WEIGHT, HELM_DELETE_POLICY = (
    "helm.sh/hook",
    "helm.sh/hook-weight",
    "helm.sh/hook-delete-policy",
)
PHASES = {"PreSync": -1, "Sync": 0, "PostSync": 1, "SyncFail": 2}  # sync_tasks.go syncPhaseOrder
HOOK_TYPES = ("PreSync", "Sync", "PostSync", "SyncFail", "Skip")  # common/types.go NewHookType
HELM_TYPES = {  # hook/helm/type.go
    "pre-install": "PreSync",
    "pre-upgrade": "PreSync",
    "post-upgrade": "PostSync",
    "post-install": "PostSync",
}
HELM_POLICIES = {  # hook/helm/delete_policy.go
    "before-hook-creation": "BeforeHookCreation",
    "hook-succeeded": "HookSucceeded",
    "hook-failed": "HookFailed",
}
# sync_tasks.go kindOrder (the kinds before Job matter here; the rest rank after them).
KIND_ORDER = (
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


def csv(doc: Doc, annotation: str) -> list[str]:
    """resource/annotations.go GetAnnotationCSVs: trimmed, non-empty, first of each."""
    raw = ((doc.get("metadata") or {}).get("annotations") or {}).get(annotation, "")
    values: list[str] = []
    for item in str(raw).split(","):
        item = item.strip()
        if item and item not in values:
            values.append(item)
    return values


def option(doc: Doc, annotation: str, key: str) -> str | None:
    """GetAnnotationOptionValue: the value of ``key=value`` in a CSV annotation."""
    for item in csv(doc, annotation):
        if item.startswith(f"{key}="):
            return item[len(key) + 1 :]
    return None


def hook_types(doc: Doc) -> list[str]:
    types = [t for t in csv(doc, HOOK) if t in HOOK_TYPES]
    if not types:
        types = [HELM_TYPES[t] for t in csv(doc, HELM_HOOK) if t in HELM_TYPES]
    return types


def is_hook(doc: Doc) -> bool:
    if HOOK in ((doc.get("metadata") or {}).get("annotations") or {}):
        types = hook_types(doc)
        return not ("Skip" in types and len(types) == 1)
    helm_hook = ((doc.get("metadata") or {}).get("annotations") or {}).get(HELM_HOOK)
    return helm_hook is not None and helm_hook != "crd-install"


def sync_phases(doc: Doc) -> list[str]:
    types = hook_types(doc)
    if "Skip" in types and len(types) == 1:
        return []
    if is_hook(doc):
        return sorted({t for t in types if t in PHASES}, key=PHASES.__getitem__)
    return ["Sync"]


def delete_policies(doc: Doc) -> list[str]:
    policies = [p for p in csv(doc, HOOK_DELETE_POLICY) if p in HELM_POLICIES.values()]
    policies += [HELM_POLICIES[p] for p in csv(doc, HELM_DELETE_POLICY) if p in HELM_POLICIES]
    return policies or ["BeforeHookCreation"]


def wave(doc: Doc) -> int:
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    for name in (SYNC_WAVE, HELM_WEIGHT):
        try:
            return int(annotations[name])
        except (KeyError, ValueError):
            continue
    return 0


def health(key: Key, live: Live) -> str | None:
    """GetResourceHealth for the kinds modelled; None where Argo CD has no check here."""
    if key.kind == "PersistentVolumeClaim":
        return {"Bound": "Healthy", "Pending": "Progressing", "Lost": "Degraded"}.get(
            str(live.status.get("phase")), "Unknown"
        )
    if key.kind == "Job":
        kinds = {
            c.get("type") for c in live.status.get("conditions", []) if c.get("status") == "True"
        }
        if "Failed" in kinds:
            return "Degraded"
        return "Healthy" if "Complete" in kinds else "Progressing"
    return None


@dataclass
class Task:
    phase: str
    key: Key
    target: Doc | None
    live: Live | None
    sync_status: str = ""  # Synced | SyncFailed | Pruned | PruneSkipped
    state: str = ""  # "" (pending) | Running | Succeeded | Failed
    message: str = ""
    # a prune task's wave, reversed (``reverse_prune_waves``) or last (``prune_last``)
    wave_override: int | None = None

    @property
    def obj(self) -> Doc:
        if self.target is not None:
            return self.target
        assert self.live is not None
        return self.live.doc

    @property
    def hook(self) -> bool:
        return is_hook(self.obj)

    @property
    def prune(self) -> bool:
        return self.target is None

    @property
    def wave(self) -> int:
        return wave(self.obj) if self.wave_override is None else self.wave_override

    @property
    def completed(self) -> bool:
        return self.state in ("Succeeded", "Failed")

    def has_policy(self, policy: str) -> bool:
        return self.hook and policy in delete_policies(self.obj)

    def order(self) -> tuple[int, int, int, str]:
        kind = KIND_ORDER.index(self.key.kind) if self.key.kind in KIND_ORDER else len(KIND_ORDER)
        return (PHASES[self.phase], self.wave, kind - len(KIND_ORDER), self.key.name)


def reverse_prune_waves(tasks: list[Task]) -> None:
    """Prune in the reverse of creation order: the waves the prune tasks hold are swapped end
    for end (the lowest with the highest, and so on), as ``syncContext.Sync`` does before it
    sorts ("symmetric swap on prune waves")."""
    waves = sorted({wave(t.obj) for t in tasks if t.prune})
    swap = dict(zip(waves, reversed(waves), strict=True))
    for task in (t for t in tasks if t.prune):
        task.wave_override = swap[wave(task.obj)]


def prune_last(tasks: list[Task]) -> None:
    """``PruneLast=true`` on a live object: its prune task runs one wave past the Sync phase's
    last (at least 0), after every object the sync applies (``syncContext.getSyncTasks``)."""
    last = max([0, *(t.wave for t in tasks if t.phase == "Sync")]) + 1
    for task in (t for t in tasks if t.prune):
        assert task.live is not None
        if option(task.live.doc, SYNC_OPTIONS, "PruneLast") == "true":
            task.wave_override = last


@dataclass
class Operation:
    """One sync operation's outcome, with the steps it took."""

    phase: str = "Running"  # Running | Succeeded | Failed
    message: str = ""
    results: dict[tuple[Key, str], Task] = field(default_factory=dict)
    deleted_hooks: list[Key] = field(default_factory=list)
    pruned: list[Key] = field(default_factory=list)
    steps: int = 0


class ArgoCD:
    """Argo CD's application controller, for Applications that deploy into the fake cluster."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    # --- tracking -------------------------------------------------------------------------------

    @staticmethod
    def tracking_id(app: str, key: Key) -> str:
        return f"{app}:{key.group}/{key.kind}:{key.namespace}/{key.name}"

    def tracked(self, app: str) -> dict[Key, Live]:
        return {
            k: v
            for k, v in self.cluster.objects.items()
            if v.annotations.get(TRACKING_ID, "").split(":")[0] == app
        }

    def targets(self, app: str, namespace: str, docs: list[Doc]) -> list[Doc]:
        """The rendered objects with the app's tracking id and the destination namespace."""
        found = []
        for doc in docs:
            target = copy.deepcopy(doc)
            meta = target.setdefault("metadata", {})
            meta.setdefault("namespace", namespace)
            key = Key.of(target, namespace)
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                TRACKING_ID: self.tracking_id(app, key),
            }
            found.append(target)
        return found

    def shared_resource_warnings(self, app: str, namespace: str, docs: list[Doc]) -> list[str]:
        """CompareAppState's SharedResourceWarning conditions for an app rendering ``docs``."""
        warnings = []
        for target in self.targets(app, namespace, docs):
            key = Key.of(target, namespace)
            live = self.cluster.get(key)
            if live is None:
                continue
            owner = live.annotations.get(TRACKING_ID, "").split(":")[0]
            if owner and owner != app:
                warnings.append(f"{key.kind}/{key.name} is part of applications {app} and {owner}")
        return warnings

    # --- sync -----------------------------------------------------------------------------------

    def sync(
        self, app: str, namespace: str, docs: list[Doc], *, prune: bool = False, max_steps: int = 50
    ) -> Operation:
        """One sync operation to its end: ``Sync`` called until it is no longer Running, with the
        cluster's controllers acting between calls."""
        targets = self.targets(app, namespace, docs)
        op = Operation()
        while op.phase == "Running":
            assert op.steps < max_steps, f"sync did not end: {op.message}"
            op.steps += 1
            self._step(app, namespace, targets, prune, op)
            self.cluster.settle()
        return op

    def _tasks(self, app: str, namespace: str, targets: list[Doc], op: Operation) -> list[Task]:
        tasks: list[Task] = []
        rendered = {Key.of(t, namespace): t for t in targets}
        for key, target in rendered.items():
            for phase in sync_phases(target):
                tasks.append(Task(phase, key, target, self.cluster.get(key)))
        for key, live in self.tracked(app).items():
            if key not in rendered and not is_hook(live.doc):
                tasks.append(Task("Sync", key, None, live))
        reverse_prune_waves(tasks)
        prune_last(tasks)
        tasks.sort(key=Task.order)
        for task in tasks:
            done = op.results.get((task.key, task.phase))
            if done is not None:
                task.sync_status, task.state, task.message = (
                    done.sync_status,
                    done.state,
                    done.message,
                )
        return tasks

    def _record(self, op: Operation, task: Task, sync_status: str, state: str, msg: str) -> None:
        task.sync_status, task.state, task.message = sync_status, state, msg
        op.results[(task.key, task.phase)] = copy.copy(task)

    def _delete_hooks(self, op: Operation, hooks: list[Task]) -> None:
        for task in hooks:
            if self.cluster.delete(task.key):
                op.deleted_hooks.append(task.key)

    def _step(
        self, app: str, namespace: str, targets: list[Doc], prune: bool, op: Operation
    ) -> None:
        tasks = self._tasks(app, namespace, targets, op)
        # 2. running tasks take their state from health
        for task in (t for t in tasks if t.state == "Running" and t.live is not None):
            assert task.live is not None
            status = health(task.key, task.live)
            if task.hook:
                state = {"Healthy": "Succeeded", "Degraded": "Failed", "Unknown": "Failed"}.get(
                    status or "Healthy", "Running"
                )
                self._record(op, task, task.sync_status, state, status or "")
            elif status in (None, "Healthy"):
                self._record(op, task, task.sync_status, "Succeeded", status or "")
            elif status == "Degraded":
                self._record(op, task, task.sync_status, "Failed", status)
        for task in (t for t in tasks if t.state == "Running" and t.live is None):
            self._record(op, task, "SyncFailed", "Failed", f"{task.key} is missing")
        multi_step = bool(tasks) and (
            (tasks[0].phase, tasks[0].wave) != (tasks[-1].phase, tasks[-1].wave)
        )
        running = [t for t in tasks if (multi_step or t.hook) and t.state == "Running"]
        if running:
            op.message = f"waiting for completion of {running[0].key}"
            return
        # 3. a completed, unsuccessful task fails the sync and deletes the HookFailed hooks
        failed_hooks = [
            t
            for t in tasks
            if t.hook and t.live is not None and t.state != "Running" and t.has_policy("HookFailed")
        ]
        succeeded_hooks = [
            t
            for t in tasks
            if t.hook
            and t.live is not None
            and t.state != "Running"
            and t.has_policy("HookSucceeded")
        ]
        if any(t.completed and t.state != "Succeeded" for t in tasks):
            self._delete_hooks(op, failed_hooks)
            op.phase, op.message = (
                "Failed",
                "one or more synchronization tasks completed unsuccessfully",
            )
            return
        pending = [t for t in tasks if t.state == ""]
        if not pending:
            self._delete_hooks(op, succeeded_hooks)
            op.phase, op.message = "Succeeded", "successfully synced (no more tasks)"
            return
        # 4. the first pending phase and wave
        first = (pending[0].phase, pending[0].wave)
        now = [t for t in pending if (t.phase, t.wave) == first]
        remaining = [t for t in pending if (t.phase, t.wave) != first]
        for task in (t for t in now if t.prune):
            assert task.live is not None
            if not prune:
                self._record(op, task, "PruneSkipped", "Succeeded", "ignored (requires pruning)")
            elif option(task.live.doc, SYNC_OPTIONS, "Prune") == "false":
                self._record(op, task, "PruneSkipped", "Succeeded", "ignored (no prune)")
            else:
                self.cluster.delete(task.key)
                op.pruned.append(task.key)
                self._record(op, task, "Pruned", "Succeeded", "pruned")
        creates = [t for t in now if not t.prune]
        recreate = [t for t in creates if t.live is not None and t.has_policy("BeforeHookCreation")]
        if recreate:
            for task in recreate:
                self.cluster.delete(task.key)
            op.message = f"waiting for deletion of hook {recreate[0].key}"
            return
        refused = False
        for task in creates:
            assert task.target is not None
            try:
                self.cluster.apply(task.target, namespace)
            except RefusedError as err:
                self._record(op, task, "SyncFailed", "Failed", str(err))
                refused = True
            else:
                self._record(op, task, "Synced", "Running", f"{task.key} configured")
        if refused:
            if not any(t.state == "Running" for t in now if t.hook):
                self._delete_hooks(op, failed_hooks)
                op.phase, op.message = "Failed", "one or more objects failed to apply"
            return
        if not remaining and not any(t.hook for t in now):
            self._delete_hooks(op, succeeded_hooks)
            op.phase, op.message = "Succeeded", "successfully synced (all tasks run)"

    # --- deletion -------------------------------------------------------------------------------

    def delete_app(self, app: str) -> list[Key]:
        """Cascading deletion of the Application: what it deletes."""
        deleted = []
        for key, live in self.tracked(app).items():
            if key.kind == "CustomResourceDefinition":
                continue
            if option(live.doc, SYNC_OPTIONS, "Delete") == "false":
                continue
            if "keep" in csv(live.doc, "helm.sh/resource-policy"):
                continue
            self.cluster.delete(key)
            deleted.append(key)
        return deleted
