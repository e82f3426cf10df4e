"""The KServe releases the chart knows, read from the chart's own table (``kserve-releases.yaml``).

That file is the one place that knows each release; this module only gives it types, so that the
emulation asks ``release.validator.min_pipeline`` instead of comparing version strings. A field the
table lacks is an error here, not a silent default: a new release must say what it does.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from multinode_llm.errors import UserError

from multinode_llm_local.chart import find_chart

TABLE = "kserve-releases.yaml"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Defaulter:
    rewrites_legacy_mode: bool
    adds_model_format_annotation: bool


@dataclass(frozen=True)
class Validator:
    raw_mode: str
    min_pipeline: int
    storage_schemes: tuple[str, ...]
    mode_change: str  # none | exact | normalized | normalized-empty-allowed
    blocked_env: tuple[str, ...]
    model_name_forbidden: bool


@dataclass(frozen=True)
class Controller:
    head_env: tuple[str, ...]
    worker_env: tuple[str, ...]
    gpu_math: str  # tensor | ray
    executors: tuple[str, ...]
    gpu_types_annotation: str  # comma-split | json
    services: tuple[str, ...]
    head_service_cleanup: bool
    legacy_status_is_raw: bool
    deletes_workers: bool
    readiness: str  # available | stuck | progressing
    watches_runtimes: bool  # a runtime's spec update reconciles its InferenceServices


@dataclass(frozen=True)
class StorageInitializer:
    package: str
    huggingface_hub: str
    hf_xet: str
    makes_parents: bool


@dataclass(frozen=True)
class LlmInferenceService:
    """What the release's llmisvc controller does with the chart's tensor x pipeline preset."""

    api_version: str  # of LLMInferenceServiceConfig
    prefix_env: bool
    tls_switch: bool
    missing_config: str  # CombineBaseError | ConfigNotFound: the reason without the preset
    applied_configs: bool  # status.appliedConfigs names the configs merged


@dataclass(frozen=True)
class Release:
    """One KServe release: what its webhooks and controller do to a multi-node InferenceService."""

    version: str
    source: str | None  # the tag read; None: unverified
    status: str  # supported | broken | unverified
    deployment_mode: str
    autoscaler_class: str
    storage: tuple[str, ...]
    defaulter: Defaulter
    validator: Validator
    requires_parallel_sizes: bool  # the runtime webhook of 0.15.0
    controller: Controller
    storage_initializer: StorageInitializer
    llm_inference_service: LlmInferenceService | None  # None: the release has none
    defects: tuple[Obj, ...]

    @property
    def minor(self) -> tuple[int, int]:
        major, minor, _ = (int(part) for part in self.version.split("."))
        return major, minor

    def has_defect(self, defect: str) -> bool:
        """Whether the table lists ``defect`` (its id) for this release; an id no release has is
        a mistake, not an answer."""
        known = _defect_ids()
        if defect not in known:
            raise ValueError(f"no KServe release has the defect {defect!r}; known: {sorted(known)}")
        return any(entry["id"] == defect for entry in self.defects)

    def builtin_runtimes(self) -> list[Obj]:
        """The ClusterServingRuntimes a default install of this release has (for the webhook)."""
        return [spec for spec in _builtin_runtimes(self.version)]


def get(version: str) -> Release:
    """The release for an exact version in the table (an unverified one: its stand-in's data)."""
    releases = _table()["releases"]
    if version not in releases:
        raise UserError(
            f"KServe {version} is not in the chart's {TABLE} ({', '.join(releases)}): "
            "pass one of those"
        )
    return _release(version)


def resolve(asked: str) -> Release:
    """What the chart's ``kserve.version`` means: exact, MAJOR.MINOR (newest patch) or empty."""
    table = _table()
    text = str(asked or table["default"]).removeprefix("v")
    if text in table["releases"]:
        return get(text)
    patches = [v for v in table["releases"] if v.startswith(f"{text}.")]
    if not patches:
        raise UserError(
            f"kserve.version={asked}: not a release in the chart's {TABLE} "
            f"({', '.join(table['releases'])}); pass one of those"
        )
    return get(max(patches, key=lambda v: tuple(int(p) for p in v.split("."))))


def llm_inference_service(version: str) -> LlmInferenceService:
    """What the release's llmisvc controller does, or UserError for a release without one."""
    found = get(version).llm_inference_service
    if found is None:
        having = [v for v in versions() if get(v).llm_inference_service is not None]
        raise UserError(
            f"KServe {version} has no LLMInferenceService in the chart's {TABLE}: pass one of "
            f"{', '.join(having)}"
        )
    return found


def versions(status: str | None = None) -> list[str]:
    """Every version in the table, optionally only those with ``status``."""
    releases: Obj = _table()["releases"]
    return [v for v, entry in releases.items() if status is None or entry["status"] == status]


def default() -> Release:
    return get(str(_table()["default"]))


@functools.cache
def _table(chart: Path | None = None) -> Obj:
    path = (chart or find_chart()) / TABLE
    data: Obj = yaml.safe_load(path.read_text())
    return data


@functools.cache
def _defect_ids() -> frozenset[str]:
    """The id of every defect any release of the table has."""
    listed = (entry.get("defects") or () for entry in _table()["releases"].values())
    return frozenset(d["id"] for defects in listed for d in defects)


@functools.cache
def _release(version: str) -> Release:
    entry: Obj = copy.deepcopy(_table()["releases"][version])
    stand_in = entry.get("renderAs")
    if stand_in:  # an unverified release: behaviour assumed from the release it renders as
        entry = {**copy.deepcopy(_table()["releases"][stand_in]), **entry}
    validator, controller = entry["validator"], entry["controller"]
    storage = entry["storageInitializer"]
    return Release(
        version=version,
        source=entry["source"],
        status=entry["status"],
        deployment_mode=entry["deploymentMode"],
        autoscaler_class=entry["autoscalerClass"],
        storage=tuple(entry["storage"]),
        defaulter=Defaulter(
            rewrites_legacy_mode=entry["defaulter"]["rewritesLegacyMode"],
            adds_model_format_annotation=entry["defaulter"]["addsModelFormatAnnotation"],
        ),
        validator=Validator(
            raw_mode=validator["rawMode"],
            min_pipeline=int(validator["minPipeline"]),
            storage_schemes=tuple(validator["storageSchemes"]),
            mode_change=validator["modeChange"],
            blocked_env=tuple(validator["blockedEnv"]),
            model_name_forbidden=bool(validator["modelNameForbidden"]),
        ),
        requires_parallel_sizes=bool(entry["runtimeWebhook"]["requiresParallelSizes"]),
        controller=Controller(
            head_env=tuple(controller["env"]["head"]),
            worker_env=tuple(controller["env"]["worker"]),
            gpu_math=controller["gpuMath"],
            executors=tuple(controller["executors"]),
            gpu_types_annotation=controller["gpuTypesAnnotation"],
            services=tuple(controller["services"]),
            head_service_cleanup=bool(controller["headServiceCleanup"]),
            legacy_status_is_raw=bool(controller["legacyStatusIsRaw"]),
            deletes_workers=bool(controller["deletesWorkers"]),
            readiness=controller["readiness"],
            watches_runtimes=bool(controller["watchesRuntimes"]),
        ),
        storage_initializer=StorageInitializer(
            package=storage["package"],
            huggingface_hub=storage["huggingfaceHub"],
            hf_xet=storage.get("hfXet", ""),
            makes_parents=bool(storage["makesParents"]),
        ),
        llm_inference_service=_llm_inference_service(entry.get("llmInferenceService")),
        defects=tuple(entry.get("defects") or ()),
    )


def _llm_inference_service(entry: Obj | None) -> LlmInferenceService | None:
    if entry is None:
        return None
    return LlmInferenceService(
        api_version=entry["apiVersion"],
        prefix_env=bool(entry["prefixEnv"]),
        tls_switch=bool(entry["tlsSwitch"]),
        missing_config=entry["missingConfig"],
        applied_configs=bool(entry["appliedConfigs"]),
    )


def _builtin_runtimes(version: str) -> list[Obj]:
    """The table's builtinRuntimes that exist in ``version``, as ClusterServingRuntime objects."""
    key = _version_key(version)
    runtimes: list[Obj] = []
    for name, entry in _table()["builtinRuntimes"].items():
        if _version_key(entry["since"]) > key:
            continue
        spec: Obj = {
            "supportedModelFormats": copy.deepcopy(entry["formats"]),
            "protocolVersions": list(entry["protocolVersions"]),
        }
        for since, change in sorted(
            (entry.get("changes") or {}).items(), key=lambda item: _version_key(item[0])
        ):
            if _version_key(since) <= key:
                spec["supportedModelFormats"] = copy.deepcopy(change["formats"])
        if "multiModel" in entry:
            spec["multiModel"] = entry["multiModel"]
        if entry.get("workerSpec"):
            spec["workerSpec"] = {"containers": [{"name": "worker-container"}]}
        runtimes.append(
            {
                "apiVersion": "serving.kserve.io/v1alpha1",
                "kind": "ClusterServingRuntime",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return runtimes


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
