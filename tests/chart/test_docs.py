"""Every value is documented where it is set, the schema describes every property, and README.md's
values table is what hack/values-table.py generates from values.yaml."""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType
from typing import Any

import yaml
from chartlib import CHART, ROOT, hack_script


def values_table() -> ModuleType:
    return hack_script("values-table")


def leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for key, value in node.items() for p in leaf_paths(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def test_every_value_is_documented_by_a_dash_dash_comment_on_itself_or_a_parent() -> None:
    text = (CHART / "values.yaml").read_text()
    documented = {key for key, _ in values_table().documented_keys(text.splitlines())}
    undocumented = [
        path
        for path in leaf_paths(yaml.safe_load(text))
        if not any(path == d or path.startswith(d + ".") for d in documented)
    ]
    assert undocumented == []


def test_the_schema_describes_every_property() -> None:
    missing: list[str] = []

    def walk(schema: dict[str, Any], where: str) -> None:
        for name, prop in schema.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{where}.{name}")
            walk(prop, f"{where}.{name}")
        for name, definition in schema.get("definitions", {}).items():
            walk(definition, f"definitions.{name}")

    schema = json.loads((CHART / "values.schema.json").read_text())
    walk(schema, "")
    assert schema["additionalProperties"] is False
    assert missing == []


def test_the_readme_values_table_has_not_drifted() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "values-table.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_values_table_lists_the_fixed_values_api() -> None:
    keys = {row.key for row in values_table().rows()}
    fixed = {
        "model.uri",
        "model.name",
        "model.hfTokenSecret.name",
        "model.hfTokenSecret.key",
        "model.storage.size",
        "model.storage.storageClassName",
        "model.storage.accessModes",
        "model.storage.existingClaim",
        "parallelism.tensor",
        "parallelism.pipeline",
        "gpu.resourceName",
        "gpu.customResourceTypes",
        "kserve.version",
        "kserve.deploymentMode",
        "inferenceService.minReplicas",
        "inferenceService.maxReplicas",
        "head.env",
        "head.resources",
        "worker.env",
        "worker.resources",
        "strategy.type",
        "shm.sizeLimit",
        "ray.port",
        "vllm.args",
        "modelCache.enabled",
        "modelCache.endpoint",
        "modelCache.upstream",
        "modelCache.store.type",
        "modelCache.store.size",
        "modelCache.storageContainer.enabled",
    }
    assert fixed <= keys, fixed - keys


def test_the_kserve_releases_doc_has_not_drifted_from_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "kserve-releases.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_prose_that_names_the_default_kserve_release_names_the_tables() -> None:
    """values.yaml's and the README's words about the default follow kserve-releases.yaml."""
    default = yaml.safe_load((CHART / "kserve-releases.yaml").read_text())["default"]
    values = (CHART / "values.yaml").read_text()
    assert f"Empty: the newest supported release, {default}." in values
    assert f"use {default}" in (CHART / "kserve-releases.yaml").read_text()
