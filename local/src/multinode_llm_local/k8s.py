"""Small pieces of Kubernetes semantics the local cluster needs: objects, merges, quantities.

Objects stay what ``helm template`` renders: JSON-like dicts (``Obj``). Only the fields the local
cluster acts on are read, each through a helper here or in the module that owns the concern.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from multinode_llm.errors import UserError

Obj = dict[str, Any]

# Merge keys of the list fields that a strategic merge patch merges item by item (Kubernetes'
# `patchMergeKey` tags on corev1.Container and corev1.PodSpec). Every other list is replaced whole.
MERGE_KEYS: Mapping[str, str] = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "resizePolicy": "resourceName",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",
}


def strategic_merge(base: Any, overlay: Any, field: str = "") -> Any:
    """Kubernetes' strategic merge patch of ``overlay`` onto ``base`` (neither is modified).

    Maps merge key by key, lists with a merge key merge item by item (base order kept, new items
    appended, as apimachinery does), other lists and scalars are replaced. ``None`` in the
    overlay means "not set": Go's ``json.Marshal`` with ``omitempty`` never sends such fields.
    """
    if overlay is None:
        return copy.deepcopy(base)
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = copy.deepcopy(base)
        for key, value in overlay.items():
            merged[key] = strategic_merge(base.get(key), value, key) if key in base else value
        return merged
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(overlay, list):
        merged_list = [copy.deepcopy(item) for item in base]
        for item in overlay:
            index = _index_by(merged_list, key, item.get(key))
            if index is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[index] = strategic_merge(merged_list[index], item)
        return merged_list
    return copy.deepcopy(overlay)


def _index_by(items: list[Obj], key: str, value: Any) -> int | None:
    for index, item in enumerate(items):
        if item.get(key) == value:
            return index
    return None


def env_value(env: Iterable[Obj], name: str) -> str | None:
    """The literal ``value`` of env var ``name`` in a container's env list, or None when absent."""
    for var in env:
        if var.get("name") == name:
            return str(var.get("value", ""))
    return None


def set_env(container: Obj, name: str, value: str) -> None:
    """Overwrite or append env var ``name`` (KServe's AddEnvVarToPodSpec)."""
    env = container.setdefault("env", [])
    for var in env:
        if var.get("name") == name:
            var["value"] = value
            var.pop("valueFrom", None)
            return
    env.append({"name": name, "value": value})


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIXES: Mapping[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity(value: Any, what: str) -> Decimal:
    """Parse a Kubernetes quantity ("2", "500m", "3Gi"); ``what`` names it in errors."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise UserError(
            f"{what}={value!r} is not a Kubernetes quantity: write it like 2, 500m or 3Gi"
        )
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_quantity(value: Any) -> str:
    """A quantity as the API server writes it back (apimachinery's Quantity.String).

    The suffix family of the input is kept (binary Ki..Ei, decimal m..E); the largest unit that
    keeps the number whole is chosen ("1000m" -> "1", "0.5" -> "500m", 1.5Gi -> "1536Mi",
    2000 -> "2k"); a binary value under 1024 is written in decimal. Exponent forms (1e3) are not
    handled: the chart never renders them.
    """
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in _SUFFIXES or "e" in text.lower():
        raise UserError(f"quantity {value!r} is not one the local cluster can canonicalize")
    amount = quantity(text, "quantity")
    if match.group(2).endswith("i") and abs(amount) >= 1024 and amount == amount.to_integral():
        number, power = int(amount), 0
        while number % 1024 == 0 and power < len(_BINARY) - 1:
            number, power = number // 1024, power + 1
        return f"{number}{_BINARY[power]}"
    milli = (amount * 1000).to_integral_value(rounding="ROUND_CEILING")
    if milli == 0:
        return "0"
    exponent = -3
    while exponent < 18 and milli % (10 ** (exponent + 6)) == 0:
        exponent += 3
    return f"{int(milli // 10 ** (exponent + 3))}{_DECIMAL[exponent]}"


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """The objects of ``kind`` (and ``name``, when given) among rendered objects."""
    return [
        obj
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj.get("metadata", {}).get("name") == name)
    ]


def deployment_status(
    replicas: int, available: int, complete: bool, elapsed_s: float, deadline_s: float
) -> Obj:
    """A Deployment's status as its controller writes it (pkg/controller/deployment), for a rollout
    that started ``elapsed_s`` ago with ``available`` of ``replicas`` pods ready.

    Available is True once no more pods are missing than the strategy allows (Recreate: none).
    Progressing is True (ReplicaSetUpdated) during the rollout, False (ProgressDeadlineExceeded)
    past ``progressDeadlineSeconds`` without completing, True (NewReplicaSetAvailable) once done.
    SetDeploymentCondition moves a changed condition to the end: during a rollout Progressing is
    listed first; once it completed, or missed its deadline, Available is.
    """
    is_available = available >= replicas
    available_condition = {
        "type": "Available",
        "status": "True" if is_available else "False",
        "reason": "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
        "message": "Deployment has minimum availability."
        if is_available
        else "Deployment does not have minimum availability.",
    }
    if complete:
        progressing = {"status": "True", "reason": "NewReplicaSetAvailable"}
    elif elapsed_s > deadline_s:
        progressing = {"status": "False", "reason": "ProgressDeadlineExceeded"}
    else:
        progressing = {"status": "True", "reason": "ReplicaSetUpdated"}
    progressing_condition = {
        "type": "Progressing",
        **progressing,
        "message": f"ReplicaSet has {progressing['reason']}.",
    }
    order = [available_condition, progressing_condition]
    if progressing["reason"] == "ReplicaSetUpdated":
        order.reverse()
    return {
        "replicas": replicas,
        "availableReplicas": available,
        "readyReplicas": available,
        "conditions": order,
    }
