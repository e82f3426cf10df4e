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


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """The objects of ``kind`` (and ``name``, when given) among rendered objects."""
    return [
        obj
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj.get("metadata", {}).get("name") == name)
    ]
