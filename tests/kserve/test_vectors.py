"""KServe conformance vectors: every case in vectors/*.yaml, fed to the local emulation.

Each vector was read from a KServe unit test at a release tag (see README.md); it runs once per
release in its `releases` list, against `multinode_llm_local.kserve` as that release. A failure
means the emulation does something that KServe's own test says that release does not.
"""

from __future__ import annotations

import copy
import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

VECTORS_DIR = Path(__file__).parent / "vectors"

CHECKS = ("validate-isvc", "default-isvc", "validate-runtime", "gpu-math", "reconcile", "status")
# The keys each check kind may use in `expect`; a typo there would otherwise pass unnoticed.
EXPECT_KEYS = {
    "validate-isvc": {"allowed", "denied", "denied_contains"},
    "validate-runtime": {"allowed", "denied", "denied_contains"},
    "default-isvc": {"annotations", "annotations_exact", "annotations_absent", "spec"},
    "gpu-math": {"nodes", "head_gpus", "worker_gpus", "error", "error_contains"},
    "reconcile": {"head", "worker", "services", "services_include", "deleted", "error"}
    | {"error_contains"},
    "status": {"conditions"},
}
WORKLOAD_KEYS = {"replicas", "env", "env_absent", "resources", "resources_absent", "labels"}
VECTOR_KEYS = {"id", "name", "source", "releases", "check", "input", "expect", "note"}
SOURCE_KEYS = {"tag", "file", "test", "case"}
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")

# The floor the suite must keep: losing vectors must fail loudly.
MIN_VECTORS = 40
MIN_RELEASES = 5


def _load() -> list[tuple[str, dict[str, Any]]]:
    loaded = []
    for path in sorted(VECTORS_DIR.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        for vector in document["vectors"]:
            loaded.append((path.stem, vector))
    return loaded


VECTORS = _load()


def _params() -> list[Any]:
    return [
        pytest.param(vector, release, id=f"{area}::{vector['id']}::{release}")
        for area, vector in VECTORS
        for release in vector["releases"]
    ]


def _kserve(module: str) -> ModuleType:
    """One module of the emulation, imported when a vector needs it (the package may be absent)."""
    return importlib.import_module(f"multinode_llm_local.kserve.{module}")


def _copy(value: Any) -> Any:
    """A private copy: YAML anchors share objects between vectors, and the emulation may mutate."""
    return copy.deepcopy(value)


# --- comparison ---------------------------------------------------------------------------------


def _same_scalar(expected: Any, actual: Any) -> bool:
    # Quantities and env values are strings in Kubernetes objects; the emulation may hold ints.
    number = isinstance(actual, int | float) and not isinstance(actual, bool)
    if isinstance(expected, str) and number:
        return expected == str(actual)
    return bool(expected == actual)


def assert_subset(expected: Any, actual: Any, path: str = "") -> None:
    """Every key of `expected` is in `actual` with a matching value; lists match item by item."""
    where = path or "<root>"
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a mapping, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}: missing key {key!r} (have {sorted(actual)})"
            assert_subset(value, actual[key], f"{path}.{key}" if path else str(key))
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{where}: {len(expected)} items wanted: {actual!r}"
        for index, (want, have) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(want, have, f"{path}[{index}]")
    else:
        assert _same_scalar(expected, actual), f"{where}: expected {expected!r}, got {actual!r}"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    """A container's env as name -> value (valueFrom entries map to their valueFrom dict)."""
    env: dict[str, Any] = {}
    for var in container.get("env") or []:
        env[var["name"]] = var["value"] if "value" in var else var.get("valueFrom")
    return env


def _expect_outcome(call: Any, error_type: type[BaseException], expect: dict[str, Any]) -> Any:
    """Run `call`; when the vector expects a refusal, check its message, else return the result."""
    exact = expect.get("denied", expect.get("error"))
    part = expect.get("denied_contains", expect.get("error_contains"))
    if exact is None and part is None:
        return call()
    with pytest.raises(error_type) as refused:
        call()
    message = str(refused.value)
    if exact is not None:
        assert message == exact
    else:  # part, then: the vector names one or the other
        assert part is not None
        assert part in message, f"{part!r} not in {message!r}"
    return None


# --- the check kinds ----------------------------------------------------------------------------


def _validate_isvc(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    admission = _kserve("admission")
    isvc, old = _copy(given["isvc"]), _copy(given.get("old"))
    _expect_outcome(
        lambda: admission.validate_isvc(release, isvc, old=old), admission.Denied, expect
    )


def _validate_runtime(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    admission = _kserve("admission")
    runtime, existing = _copy(given["runtime"]), _copy(given.get("existing") or [])
    _expect_outcome(
        lambda: admission.validate_runtime(release, runtime, existing), admission.Denied, expect
    )


def _default_isvc(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    admission = _kserve("admission")
    isvc = _copy(given["isvc"])
    defaulted = admission.default_isvc(release, isvc, config=_copy(given.get("config")))
    annotations = (defaulted.get("metadata") or {}).get("annotations") or {}
    if "annotations_exact" in expect:
        assert annotations == expect["annotations_exact"]
    assert_subset(expect.get("annotations", {}), annotations, "metadata.annotations")
    for key in expect.get("annotations_absent", []):
        assert key not in annotations, f"annotation {key!r} should not be set: {annotations}"
    assert_subset(expect.get("spec", {}), defaulted.get("spec") or {}, "spec")


def _gpu_math(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    controller = _kserve("controller")
    result = _expect_outcome(
        lambda: controller.compute_nodes(
            release,
            tensor=given["tensor"],
            pipeline=given["pipeline"],
            head_gpus=given.get("head_gpus", 0),
            worker_gpus=given.get("worker_gpus", 0),
            executor=given.get("executor", "ray"),
        ),
        controller.ReconcileError,
        expect,
    )
    if result is None:
        return
    nodes, head_gpus, worker_gpus = result
    got = {"nodes": nodes, "head_gpus": head_gpus, "worker_gpus": worker_gpus}
    want = {key: expect[key] for key in ("nodes", "head_gpus", "worker_gpus") if key in expect}
    assert {key: got[key] for key in want} == want


def _check_workload(role: str, workload: Any, expect: dict[str, Any]) -> None:
    if "replicas" in expect:
        assert workload.replicas == expect["replicas"], f"{role} replicas"
    env = _env(workload.container)
    assert_subset(expect.get("env", {}), env, f"{role}.env")
    for name in expect.get("env_absent", []):
        assert name not in env, f"{role}: {name} should not be set (env: {env})"
    resources = workload.container.get("resources") or {}
    assert_subset(expect.get("resources", {}), resources, f"{role}.resources")
    for name in expect.get("resources_absent", []):
        for kind in ("limits", "requests"):
            held = resources.get(kind) or {}
            assert name not in held, f"{role}: {kind} should not hold {name} ({held})"
    assert_subset(expect.get("labels", {}), dict(workload.labels), f"{role}.labels")


def _reconcile(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    controller = _kserve("controller")
    isvc, runtime = _copy(given["isvc"]), _copy(given["runtime"])
    result = _expect_outcome(
        lambda: controller.reconcile(release, isvc, runtime, generation=given.get("generation", 1)),
        controller.ReconcileError,
        expect,
    )
    if result is None:
        return
    for role in ("head", "worker"):
        if role in expect:
            _check_workload(role, getattr(result, role), expect[role])
    names = {service.name for service in result.services}
    if "services" in expect:
        assert names == set(expect["services"])
    missing = set(expect.get("services_include", [])) - names
    assert not missing, f"Services {sorted(missing)} not created (have {sorted(names)})"
    if "deleted" in expect:
        assert set(result.deleted) == set(expect["deleted"])


def _status(release: Any, given: dict[str, Any], expect: dict[str, Any]) -> None:
    status = _kserve("status")
    conditions = status.conditions(
        release, _copy(given["head"]), _copy(given.get("worker")), given.get("generation", 1)
    )
    assert_subset(expect["conditions"], conditions, "conditions")


RUNNERS = {
    "validate-isvc": _validate_isvc,
    "default-isvc": _default_isvc,
    "validate-runtime": _validate_runtime,
    "gpu-math": _gpu_math,
    "reconcile": _reconcile,
    "status": _status,
}


@pytest.mark.parametrize(("vector", "version"), _params())
def test_vector(vector: dict[str, Any], version: str) -> None:
    release = _kserve("releases").get(version)
    RUNNERS[vector["check"]](release, vector["input"], vector["expect"])


# --- the files themselves -----------------------------------------------------------------------


def test_vectors_are_well_formed() -> None:
    problems = []
    seen = set()
    for area, vector in VECTORS:
        label = f"{area}::{vector.get('id')}"
        if label in seen:
            problems.append(f"{label}: duplicate id")
        seen.add(label)
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", str(vector.get("id"))):
            problems.append(f"{label}: id must be lower-case words joined by '-'")
        if set(vector) - VECTOR_KEYS or {"name", "source", "releases", "check"} - set(vector):
            problems.append(f"{label}: keys {sorted(vector)}")
        source = vector.get("source") or {}
        if set(source) != SOURCE_KEYS or not all(source.values()):
            problems.append(f"{label}: source needs exactly {sorted(SOURCE_KEYS)}")
        releases = vector.get("releases") or []
        if not releases or not all(RELEASE.match(str(r)) for r in releases):
            problems.append(f"{label}: releases must be versions like 0.18.1")
        if len(set(releases)) != len(releases):
            problems.append(f"{label}: a release is listed twice")
        if str(source.get("tag", "")).removeprefix("v") not in releases:
            problems.append(f"{label}: the tag it was read at must be among its releases")
        check = vector.get("check")
        if check not in CHECKS:
            problems.append(f"{label}: unknown check {check!r}")
            continue
        expect = vector.get("expect") or {}
        if not expect or set(expect) - EXPECT_KEYS[check]:
            allowed = sorted(EXPECT_KEYS[check])
            problems.append(f"{label}: expect keys {sorted(expect)} (allowed {allowed})")
        if check == "reconcile":
            for role in ("head", "worker"):
                if set(expect.get(role, {})) - WORKLOAD_KEYS:
                    problems.append(f"{label}: {role} keys {sorted(expect[role])}")
    assert not problems, "\n".join(problems)


def test_coverage_floor() -> None:
    releases = {release for _, vector in VECTORS for release in vector["releases"]}
    kinds = {vector["check"] for _, vector in VECTORS}
    assert len(VECTORS) >= MIN_VECTORS, f"only {len(VECTORS)} vectors"
    assert len(releases) >= MIN_RELEASES, f"only releases {sorted(releases)}"
    assert kinds == set(CHECKS), f"check kinds without a vector: {sorted(set(CHECKS) - kinds)}"
