"""Every limit values.schema.json sets on a value (its range, choices, pattern, length) is refused
by the chart's validate template, naming the value, the limit and why, in the same round as the
chart's other refusals.

Helm checks a schema before any template runs, and says no why ("minimum: got 1, want 2", "value
must be 1"); so the schema keeps the types, keys and required fields, and its limits sit in
"x-limits", which hack/values-docs.py copies with each value's description into files/limits.json
for the templates.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from multinode_llm_testing.chartlib import CHART, deep_merge, template

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
GOOD: dict[str, Any] = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}}
# The keywords Helm would check before any template: none may sit outside "x-limits".
LIMIT_KEYWORDS = {
    "const",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
}


def resolved(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    return {**SCHEMA["definitions"][ref.rsplit("/", 1)[-1]], **node}


def nodes(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            if key in ("properties", "definitions"):
                for name, child in value.items():
                    yield from nodes(child, f"{where}.{key}.{name}")
            elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
                for i, child in enumerate(value if isinstance(value, list) else [value]):
                    yield from nodes(child, f"{where}.{key}[{i}]")


def limited_values() -> Iterator[tuple[str, dict[str, Any], str]]:
    """(dotted path, limits, why) of each value reached through properties alone."""

    def walk(
        node: dict[str, Any], path: str, why: str
    ) -> Iterator[tuple[str, dict[str, Any], str]]:
        node = resolved(node)
        why = node.get("description", why)
        if "x-limits" in node:
            yield path, node["x-limits"], node["x-limits"].get("why", why)
        for name, child in node.get("properties", {}).items():
            yield from walk(child, f"{path}.{name}" if path else name, why)

    yield from walk(SCHEMA, "", "")


def breaking(limits: dict[str, Any]) -> Any:
    """A value of the right type that breaks the first of ``limits``."""
    if "const" in limits:
        return limits["const"] + 1
    if "enum" in limits:
        return "not-one-of-them"
    if "minimum" in limits:
        return limits["minimum"] - 1
    if "exclusiveMinimum" in limits:
        return limits["exclusiveMinimum"]
    if "maximum" in limits:
        return limits["maximum"] + 1
    if "pattern" in limits:
        return "!! not it"
    if "minLength" in limits:
        return ""
    if "maxLength" in limits:
        return "a" * (limits["maxLength"] + 1)
    if "minItems" in limits:
        return []
    raise AssertionError(f"no breaking value for {limits}")


def at(path: str, value: Any) -> dict[str, Any]:
    tree: Any = value
    for part in reversed(path.split(".")):
        tree = {part: tree}
    result: dict[str, Any] = tree
    return result


LIMITED = {
    path: (limits, why) for path, limits, why in limited_values() if "uniqueItems" not in limits
}


def test_helm_checks_no_limit_before_the_templates() -> None:
    for where, node in nodes(SCHEMA):
        assert not LIMIT_KEYWORDS & node.keys(), f"{where}: move {LIMIT_KEYWORDS & node.keys()}"
    assert len(LIMITED) > 40


@pytest.mark.parametrize("path", sorted(LIMITED))
def test_each_limit_is_refused_naming_the_value_the_limit_and_why(helm4: str, path: str) -> None:
    limits, why = LIMITED[path]
    bad = breaking(limits)
    render = template(helm4, values=deep_merge(GOOD, at(path, bad)))
    assert render.returncode != 0, f"{path}={bad!r} rendered"
    assert "values don't meet the specifications of the schema" not in render.stderr
    assert "execution error at (multinode-llm/templates/validate/values.yaml" in render.stderr
    shown = bad if isinstance(bad, str) else json.dumps(bad)
    [line] = [ln for ln in render.stderr.splitlines() if ln.startswith(f"  - {path}={shown} must ")]
    assert line.endswith(f": {why}"), line
    assert why, f"{path}: a limit without a reason (describe the value, or give x-limits a why)"


def test_limits_and_the_chart_s_other_refusals_come_in_one_round(major: str) -> None:
    bad = {
        "parallelism": {"pipeline": 1},
        "inferenceService": {"maxReplicas": 2},
        "strategy": {"type": "BlueGreen"},
        "gpu": {"resourceName": "example.com/gpu"},
        "image": {"repository": "registry.example.com/multinode-llm-accel"},
    }
    render = template(major, values=deep_merge(GOOD, bad))
    assert render.returncode != 0
    assert render.stderr.count("value(s) to fix") == 1, render.stderr
    assert "4 value(s) to fix" in render.stderr, render.stderr
    for start in (
        "parallelism.pipeline=1 must be at least 2: ",
        "inferenceService.maxReplicas=2 must be 1: ",
        "one group per InferenceService is KServe's rule",
        "strategy.type=BlueGreen must be one of Recreate, RollingUpdate: ",
        "gpu.resourceName=example.com/gpu is not a GPU type KServe knows",
    ):
        assert start in render.stderr, render.stderr


def test_a_typo_or_a_wrong_type_is_still_helm_s_schema_check(major: str) -> None:
    render = template(major, values=deep_merge(GOOD, {"parallelism": {"pipelines": 2}}))
    assert render.returncode != 0
    assert "values don't meet the specifications of the schema" in render.stderr
    assert "pipelines" in render.stderr
