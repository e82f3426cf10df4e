"""The openAPIV3Schema of a CustomResourceDefinition as a strict JSON schema.

An API server prunes fields a structural schema does not declare, silently. To catch what it would
drop (a typo such as `storageURI`), every object schema with `properties` and no
`x-kubernetes-preserve-unknown-fields` refuses unknown fields here, as kubeconform's strict
mode does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if (
            not schema.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in out
        ):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = strict(out["items"])
    for key in SUBSCHEMA_LISTS:
        if key in out:
            out[key] = [strict(s) for s in out[key]]
    if isinstance(out.get("not"), dict):
        out["not"] = strict(out["not"])
    return out


def crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict schema, for every served version of every CRD in the folder."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            # kustomize patches beside a CRD (a conversion webhook's) are no CRD of their own
            if (
                not crd
                or crd.get("kind") != "CustomResourceDefinition"
                or "group" not in crd.get("spec", {})
            ):
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    schema = strict(version["schema"]["openAPIV3Schema"])
                    found[(f"{group}/{version['name']}", kind)] = schema
    return found


def schema_errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    """Where ``doc`` breaks a strict CRD schema (Draft 4, the dialect of openAPIV3Schema)."""
    return [
        f"{e.json_path}: {e.message}" for e in jsonschema.Draft4Validator(schema).iter_errors(doc)
    ]


def crd_schemas_from_env(variable: str, whose: str, ci_dir: str) -> dict[tuple[str, str], Any]:
    """``crd_schemas`` of the folder the environment variable names; skips saying so where it is
    unset (reference data beside the checkout, which CI points at)."""
    crd_dir = os.environ.get(variable, "")
    if not crd_dir:
        pytest.skip(
            f"{variable} is unset: the check against {whose} real CRDs needs them (CI: {ci_dir})"
        )
    found = crd_schemas(Path(crd_dir))
    assert found, f"no CustomResourceDefinition in {crd_dir}"
    return found
