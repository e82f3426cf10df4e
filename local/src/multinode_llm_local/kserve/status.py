"""The InferenceService status KServe reports for a multi-node group, per release.

From ``pkg/apis/serving/v1beta1/inference_service_status.go`` at each tag: ``PropagateRawStatus``
over the head and worker Deployments (``getDeploymentCondition``), then Ready from PredictorReady
and IngressReady (knative's living condition set; the raw Ingress reconciler,
``reconcilers/ingress/kube_ingress_reconciler.go``, creates no Ingress and reports IngressReady
False "Predictor ingress not created" until PredictorReady is True). The release's
``controller.readiness`` (``kserve-releases.yaml``) says which algorithm it runs:

- ``available`` (0.15.x): PredictorReady follows Available of both Deployments;
- ``stuck`` (0.16.0 .. 0.19.0): Progressing is read too, and for two Deployments its reason is
  built from the conditions listed before it, so it never equals ``NewReplicaSetAvailable`` and
  PredictorReady stays Unknown once the group is up;
- ``progressing`` (0.20.0, kserve#5703): the reason is the Deployments' own, and Unknown is kept
  only while Available is not True.

A Deployment status here is the dict Kubernetes writes (``replicas``, ``availableReplicas``,
``observedGeneration``, ``conditions`` in their order); ``k8s.deployment_status`` makes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multinode_llm_local.k8s import Obj
from multinode_llm_local.kserve.releases import Release

INGRESS_NOT_CREATED = "Predictor ingress not created"


@dataclass
class _Condition:
    status: str = ""
    reason: str = ""
    message: str = ""
    reasons: list[str] = field(default_factory=list)


def conditions(
    release: Release, head: Obj | None, worker: Obj | None, generation: int = 1
) -> dict[str, dict[str, str]]:
    """PredictorReady, IngressReady and Ready (type -> {"status", "reason"}) for the group."""
    deployments = [("predictor", head or {}), ("worker", worker or {})]
    if worker is None:
        deployments = deployments[:1]
    ready = _predictor_ready(release, deployments)
    result: dict[str, dict[str, str]] = {}
    if ready is not None:
        result["PredictorReady"] = {"status": ready[0], "reason": ready[1]}
    predictor_true = ready is not None and ready[0] == "True"
    result["IngressReady"] = (
        {"status": "True", "reason": ""}
        if predictor_true
        else {"status": "False", "reason": INGRESS_NOT_CREATED}
    )
    result["Ready"] = _living(result)
    del generation  # status.observedGeneration is the head Deployment's, not the ISVC's
    return result


def observed_generation(head: Obj | None) -> int | None:
    """``status.observedGeneration``: the head Deployment's, at every release."""
    value = (head or {}).get("observedGeneration")
    return None if value is None else int(value)


def _predictor_ready(
    release: Release, deployments: list[tuple[str, Obj]]
) -> tuple[str, str] | None:
    readiness = release.controller.readiness
    available = _condition(deployments, "Available", readiness)
    if readiness == "available":
        if not available.status:
            return None  # no condition yet: PredictorReady is not set
        return available.status, available.reason
    progressing = _condition(deployments, "Progressing", readiness)
    failure = _condition(deployments, "ReplicaFailure", readiness)
    ready = ("False", "")
    if available.status == "True":
        ready = ("True", available.reason)
    if progressing.status == "False":
        if progressing.message:
            ready = ("False", progressing.reason)
    elif progressing.status == "True":
        if progressing.reason == "NewReplicaSetAvailable":
            ready = ("True", progressing.reason)
        elif readiness == "stuck" or available.status != "True":
            ready = ("Unknown", progressing.reason)
    if available.status == "False":
        ready = ("False", available.reason)
    if failure.status == "True":
        ready = ("False", failure.reason)
    return ready


def _condition(deployments: list[tuple[str, Obj]], kind: str, readiness: str) -> _Condition:
    """``getDeploymentCondition``: one condition of every Deployment, folded into one."""
    if len(deployments) == 1:
        for cond in deployments[0][1].get("conditions") or []:
            if cond.get("type") == kind:
                return _Condition(cond["status"], cond.get("reason", ""), cond.get("message", ""))
        return _Condition()
    statuses: list[str] = []
    messages: list[str] = []
    raw: list[str] = []
    folded = _Condition()
    for name, status in deployments:
        prefix = "worker-container: " if "worker" in name else "predictor-container: "
        for cond in status.get("conditions") or []:
            if cond.get("type") == kind:
                statuses.append(cond["status"])
                messages.append(prefix + cond.get("message", ""))
                raw.append(cond.get("reason", ""))
                if readiness == "progressing":
                    folded.reasons.append(prefix + cond.get("reason", ""))
                break
            if readiness != "progressing":  # <= 0.19: the reasons of the conditions before it
                folded.reasons.append(prefix + cond.get("reason", ""))
    if len(statuses) == len(deployments):
        folded.status = "True" if all(s == "True" for s in statuses) else "False"
        folded.message = ", ".join(messages)
        if readiness == "progressing":
            same = all(r == raw[0] for r in raw)
            folded.reason = raw[0] if same else ", ".join(folded.reasons)
    if readiness != "progressing":
        folded.reason = ", ".join(folded.reasons)
    return folded


def _living(result: dict[str, dict[str, str]]) -> dict[str, str]:
    """Ready of knative's living condition set: False if a dependent is, else Unknown, else True."""
    dependents = [result.get("PredictorReady", {"status": "Unknown", "reason": ""})]
    dependents.append(result["IngressReady"])
    for wanted in ("False", "Unknown"):
        for cond in dependents:
            if cond["status"] == wanted:
                return {"status": wanted, "reason": cond["reason"]}
    return {"status": "True", "reason": ""}
