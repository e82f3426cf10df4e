"""FAKE of the Kubernetes API server and of the two controllers these findings need.

No API server can run here, so this stands in for one, and only for what Helm's and Argo CD's
release behaviour (helm_model.py, argo_model.py) reads and writes:

- objects by group, kind, namespace and name (cluster-scoped kinds have no namespace), each with a
  uid that a delete and a create again change;
- create (AlreadyExists when the name is taken), update (the tool's three-way patch or server-side
  apply, taken here as "the live object becomes the target": the chart owns every field it
  renders), delete;
- the API server's update validation that decides the chart's design: a claim's spec is immutable
  but for its requested size, a Job's pod template is immutable (kubernetes
  pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimUpdate,
  pkg/apis/batch/validation/validation.go ValidateJobSpecUpdate);
- an admission webhook that may refuse an object (``reject``), as KServe's does;
- the persistent-volume binder: a claim is Bound once created (status.phase);
- the Job controller: a Job whose claims exist runs to Complete (or Failed, when ``job_fails``
  says so); one that mounts a missing claim stays pending, its pod unschedulable. A download Job
  that completes leaves its model on the claim; it fetches from the Hub only when the claim does
  not hold that model yet (both charts' downloaders skip what is on disk), which ``downloads``
  records.

Left out: pvc-protection (a deleted claim a pod still mounts stays Terminating until the pod
stops: the data goes then), WaitForFirstConsumer binding (both charts put the claim and its Job in
one step), volume expansion support of the class, a shrink refusal, quotas, garbage collection of
owned objects, field managers, defaulting, and every other kind's controller.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Doc = dict[str, Any]

CLUSTER_SCOPED = frozenset(
    {
        "ClusterServingRuntime",
        "ClusterStorageContainer",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Namespace",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
    }
)


class RefusedError(Exception):
    """The API server refused a request; the message reads as kubectl prints it."""


class AlreadyExistsError(RefusedError):
    pass


class NotFoundError(RefusedError):
    pass


class InvalidError(RefusedError):
    pass


class RejectedError(RefusedError):
    """An admission webhook denied the request."""


@dataclass(frozen=True, order=True)
class Key:
    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, doc: Doc, namespace: str = "") -> Key:
        """The key of a rendered or live object; ``namespace`` where the document names none (the
        release's or the application's), dropped for cluster-scoped kinds."""
        api_version = str(doc.get("apiVersion", ""))
        group = api_version.split("/")[0] if "/" in api_version else ""
        kind = str(doc["kind"])
        meta = doc.get("metadata", {})
        ns = "" if kind in CLUSTER_SCOPED else str(meta.get("namespace") or namespace)
        return cls(group, kind, ns, str(meta["name"]))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass
class Live:
    """One stored object: what the last writer sent, and what the cluster keeps beside it."""

    doc: Doc
    uid: int
    status: dict[str, Any] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)  # a claim: the model URIs staged onto it
    waiting: str = ""  # a Job: why its pod cannot start

    @property
    def annotations(self) -> dict[str, str]:
        found: dict[str, str] = self.doc.get("metadata", {}).get("annotations") or {}
        return found

    @property
    def labels(self) -> dict[str, str]:
        found: dict[str, str] = self.doc.get("metadata", {}).get("labels") or {}
        return found


def claims_of(job: Doc) -> list[str]:
    """The claims a Job's pod mounts."""
    volumes = job.get("spec", {}).get("template", {}).get("spec", {}).get("volumes") or []
    return [
        v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
    ]


def model_of(job: Doc) -> str:
    """The hf:// URI a download Job stages (both charts pass it as an argument), or ""."""
    for container in job.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        for arg in container.get("args") or []:
            if str(arg).startswith("hf://"):
                return str(arg)
    return ""


def _never(_: Doc) -> bool:
    return False


def _admit(_: Doc) -> str | None:
    return None


class FakeCluster:
    """The API server side (see the module docstring for what it keeps and what it leaves out)."""

    def __init__(
        self,
        *,
        reject: Callable[[Doc], str | None] = _admit,
        job_fails: Callable[[Doc], bool] = _never,
    ) -> None:
        self.objects: dict[Key, Live] = {}
        self.reject = reject
        self.job_fails = job_fails
        self.events: list[tuple[str, Key]] = []  # ("create" | "update" | "delete", key)
        self.downloads: list[tuple[str, str]] = []  # (claim, model) fetched from the Hub
        self._uids = itertools.count(1)

    # --- the API -------------------------------------------------------------------------------

    def get(self, key: Key) -> Live | None:
        return self.objects.get(key)

    def create(self, doc: Doc, namespace: str = "") -> Live:
        key = Key.of(doc, namespace)
        if key in self.objects:
            raise AlreadyExistsError(f'{key.kind.lower()}s "{key.name}" already exists')
        self._admission(doc, key)
        live = Live(doc=self._stored(doc, key), uid=next(self._uids))
        if key.kind == "PersistentVolumeClaim":
            live.status = {"phase": "Pending"}
        self.objects[key] = live
        self.events.append(("create", key))
        return live

    def update(self, doc: Doc, namespace: str = "") -> Live:
        key = Key.of(doc, namespace)
        live = self.objects.get(key)
        if live is None:
            raise NotFoundError(f'{key.kind.lower()}s "{key.name}" not found')
        self._validate_update(key, live.doc, doc)
        self._admission(doc, key)
        live.doc = self._stored(doc, key)
        self.events.append(("update", key))
        return live

    def apply(self, doc: Doc, namespace: str = "") -> Live:
        """kubectl apply / server-side apply: create, or update what is there."""
        if Key.of(doc, namespace) in self.objects:
            return self.update(doc, namespace)
        return self.create(doc, namespace)

    def delete(self, key: Key) -> bool:
        """Deletes now (no finalizers here); False when there was nothing to delete."""
        if self.objects.pop(key, None) is None:
            return False
        self.events.append(("delete", key))
        return True

    # --- the controllers ------------------------------------------------------------------------

    def settle(self) -> None:
        """Runs the binder, then the Job controller (claims bind before Jobs that mount them)."""
        for key, live in self.objects.items():
            if key.kind == "PersistentVolumeClaim" and live.status.get("phase") == "Pending":
                live.status = {"phase": "Bound"}
        for key, live in list(self.objects.items()):
            if key.kind == "Job" and not job_finished(live):
                self._run_job(key, live)

    def _run_job(self, key: Key, live: Live) -> None:
        missing = [
            c
            for c in claims_of(live.doc)
            if Key("", "PersistentVolumeClaim", key.namespace, c) not in self.objects
        ]
        if missing:
            live.waiting = f'persistentvolumeclaim "{missing[0]}" not found'
            return
        live.waiting = ""
        if self.job_fails(live.doc):
            live.status = {
                "failed": 1,
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ],
            }
            return
        model = model_of(live.doc)
        for claim in claims_of(live.doc):
            volume = self.objects[Key("", "PersistentVolumeClaim", key.namespace, claim)]
            if model and model not in volume.models:
                self.downloads.append((claim, model))
                volume.models.add(model)
        live.status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}

    # --- helpers --------------------------------------------------------------------------------

    def _stored(self, doc: Doc, key: Key) -> Doc:
        stored = copy.deepcopy(doc)
        stored.setdefault("metadata", {})
        if key.namespace:
            stored["metadata"]["namespace"] = key.namespace
        else:
            stored["metadata"].pop("namespace", None)
        stored.pop("status", None)
        return stored

    def _admission(self, doc: Doc, key: Key) -> None:
        reason = self.reject(doc)
        if reason:
            raise RejectedError(f"admission webhook denied the request for {key}: {reason}")

    @staticmethod
    def _validate_update(key: Key, old: Doc, new: Doc) -> None:
        if key.kind == "PersistentVolumeClaim":
            before, after = copy.deepcopy(old.get("spec", {})), copy.deepcopy(new.get("spec", {}))
            before.get("resources", {}).pop("requests", None)
            after.get("resources", {}).pop("requests", None)
            if before != after:
                raise InvalidError(
                    f'PersistentVolumeClaim "{key.name}" is invalid: spec: Forbidden: spec is '
                    "immutable after creation except resources.requests and "
                    "volumeAttributesClassName for bound claims"
                )
        template = old.get("spec", {}).get("template"), new.get("spec", {}).get("template")
        if key.kind == "Job" and template[0] != template[1]:
            raise InvalidError(
                f'Job.batch "{key.name}" is invalid: spec.template: Invalid value: '
                "field is immutable"
            )

    # --- what tests read ------------------------------------------------------------------------

    def of_kind(self, kind: str, namespace: str | None = None) -> dict[Key, Live]:
        return {
            k: v
            for k, v in self.objects.items()
            if k.kind == kind and (namespace is None or k.namespace == namespace)
        }


def job_finished(live: Live) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in live.status.get("conditions", [])
    )


def job_failed(live: Live) -> bool:
    return any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in live.status.get("conditions", [])
    )
