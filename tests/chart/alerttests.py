"""`promtool test rules` unit tests of the chart's alerts, as series a Prometheus would scrape.

The series carry the labels the PodMonitors give them (job, inferenceservice, plus the operator's
namespace, pod, container, endpoint, instance), for release `llm` in namespace `serving` rendered
with monitoring.rules' durations shortened (engineNotReadyFor and cacheStoreFullFor 10m). Each
alert has a case where it fires on its failure and one where a healthy group or cache keeps it
quiet.
"""

from __future__ import annotations

from typing import Any

NAMESPACE, ISVC = "serving", "llm-multinode-llm"
HEAD_POD, WORKER_POD = f"{ISVC}-predictor-6d9f-abcde", f"{ISVC}-predictor-worker-7c8b-fghij"
CACHE_JOB, CACHE_POD = f"{ISVC}-cache", f"{ISVC}-cache-x7k2p"
CAUSES = ("worker_lost", "head_lost", "engine_exited", "group_timeout", "engine_hung", "unknown")
GROUP_ALERTS = (
    "MultinodeLLMGroupDegraded",
    "MultinodeLLMEngineNotReady",
    "MultinodeLLMCrashLooping",
)
CACHE_ALERTS = ("MultinodeLLMCacheUpstreamErrors", "MultinodeLLMCacheStoreFull")

Series = dict[str, str]


def labels(**pairs: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


def target(pod: str, role: str, port: str = "status") -> dict[str, str]:
    container = "kserve-container" if role == "head" else "worker-container"
    number = "8081" if port == "status" else "8080"
    return {
        "namespace": NAMESPACE,
        "inferenceservice": ISVC,
        "job": ISVC,
        "pod": pod,
        "container": container,
        "endpoint": port,
        "instance": f"10.0.0.{1 if role == 'head' else 2}:{number}",
    }


def member(pod: str, role: str) -> dict[str, str]:
    return {**target(pod, role), "role": role}


def series(name: str, where: dict[str, str], values: str) -> Series:
    return {"series": f"{name}{{{labels(**where)}}}", "values": values}


def healthy_group(minutes: int, **override: str) -> list[Series]:
    """A formed two-node group, engine ready, nothing restarting; `override` replaces the values
    of a series by its short name (e.g. lost_nodes, worker_up, engine_ready)."""
    head, worker = member(HEAD_POD, "head"), member(WORKER_POD, "worker")
    flat = f"x{minutes}"
    values = {
        "nodes": "2" + flat,
        "expected": "2" + flat,
        "formation": "95" + flat,
        "lost_nodes": "0" + flat,
        "engine_ready": "1" + flat,
        "joined": "1" + flat,
        "head_up": "1" + flat,
        "worker_up": "1" + flat,
        "head_restarts": "0" + flat,
        "head_ready": "1" + flat,
        **override,
    }
    found = [
        series("multinode_llm_group_nodes", head, values["nodes"]),
        series("multinode_llm_group_nodes_expected", head, values["expected"]),
        series("multinode_llm_group_lost_nodes", head, values["lost_nodes"]),
        series("multinode_llm_worker_joined", worker, values["joined"]),
        series("multinode_llm_probe_ok", {**head, "probe": "ready"}, values["head_ready"]),
        series("up", target(HEAD_POD, "head"), values["head_up"]),
        series("up", target(WORKER_POD, "worker"), values["worker_up"]),
    ]
    if values["formation"]:
        found.append(series("multinode_llm_group_formation_seconds", head, values["formation"]))
    if values["engine_ready"]:
        found.append(series("multinode_llm_engine_ready", head, values["engine_ready"]))
    for cause in CAUSES:
        restarts = values["head_restarts"] if cause == "engine_exited" else "0" + flat
        found.append(series("multinode_llm_restarts_total", {**head, "cause": cause}, restarts))
        found.append(series("multinode_llm_restarts_total", {**worker, "cause": cause}, "0" + flat))
    return found


def healthy_cache(minutes: int, **override: str) -> list[Series]:
    """One cache pod that fetches without errors and has room; `override` as in healthy_group."""
    pod = {
        "namespace": NAMESPACE,
        "job": CACHE_JOB,
        "pod": CACHE_POD,
        "node": "gpu-node-1",
        "container": "cache",
        "endpoint": "http",
    }
    flat = f"x{minutes}"
    values = {
        "requests": f"0+10{flat}",
        "errors": "0" + flat,
        "store": "400" + flat,
        "limit": "1000" + flat,
        "evictions": "0" + flat,
        **override,
    }
    return [
        series(
            "multinode_llm_cache_upstream_requests_total",
            {**pod, "kind": "blob"},
            values["requests"],
        ),
        series(
            "multinode_llm_cache_upstream_errors_total", {**pod, "kind": "blob"}, values["errors"]
        ),
        series("multinode_llm_cache_store_bytes", pod, values["store"]),
        series("multinode_llm_cache_store_limit_bytes", pod, values["limit"]),
        series("multinode_llm_cache_evictions", pod, values["evictions"]),
    ]


def alert(name: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": f} for f in fired]}


def quiet(at: str, *names: str) -> list[dict[str, Any]]:
    return [alert(name, at) for name in names]


def case(name: str, input_series: list[Series], checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "interval": "1m", "input_series": input_series, "alert_rule_test": checks}


def group_pod(pod: str, severity: str) -> dict[str, str]:
    return {"severity": severity, "namespace": NAMESPACE, "inferenceservice": ISVC, "pod": pod}


def group_cases() -> list[dict[str, Any]]:
    head_ready = {**member(HEAD_POD, "head"), "severity": "critical"}
    degraded = {"severity": "critical", "namespace": NAMESPACE, "inferenceservice": ISVC}
    return [
        case("a healthy group raises nothing", healthy_group(60), quiet("59m", *GROUP_ALERTS)),
        case(
            "a lost worker degrades the group once it lasts groupDegradedFor",
            healthy_group(30, nodes="2x5 1x25", lost_nodes="0x5 1x25"),
            [
                alert("MultinodeLLMGroupDegraded", "8m"),
                alert("MultinodeLLMGroupDegraded", "15m", degraded),
            ],
        ),
        case(
            "a worker whose status port stops answering degrades the group",
            healthy_group(30, worker_up="1x5 0x25"),
            [alert("MultinodeLLMGroupDegraded", "15m", degraded)],
        ),
        case(
            "a group still forming is not degraded (the engine's alert covers it)",
            healthy_group(30, nodes="1x30", formation="", engine_ready="0x30", head_ready="0x30"),
            quiet("25m", "MultinodeLLMGroupDegraded"),
        ),
        case(
            "a head that started again stays degraded while the group re-forms, then resolves",
            healthy_group(
                40,
                head_restarts="0x5 1x35",
                head_ready="1x5 0x25 1x10",
                formation="95x5 _x25 95x10",
                nodes="2x5 1x25 2x10",
            ),
            [
                alert("MultinodeLLMGroupDegraded", "20m", degraded),
                alert("MultinodeLLMGroupDegraded", "38m"),
            ],
        ),
        case(
            "an engine not ready past engineNotReadyFor",
            healthy_group(30, engine_ready="0x30"),
            [
                alert("MultinodeLLMEngineNotReady", "5m"),
                alert("MultinodeLLMEngineNotReady", "15m", head_ready),
            ],
        ),
        case(
            "no head scraped at all",
            healthy_group(30, engine_ready=""),
            [
                alert(
                    "MultinodeLLMEngineNotReady",
                    "15m",
                    {"severity": "critical", "namespace": NAMESPACE, "inferenceservice": ISVC},
                )
            ],
        ),
        case(
            "three restarts within crashLoopWindow, then none for a window",
            healthy_group(70, head_restarts="0 1 2 3x67"),
            [
                alert("MultinodeLLMCrashLooping", "2m"),
                alert(
                    "MultinodeLLMCrashLooping",
                    "5m",
                    {**group_pod(HEAD_POD, "warning"), "role": "head"},
                ),
                alert("MultinodeLLMCrashLooping", "40m"),
            ],
        ),
    ]


def cache_cases() -> list[dict[str, Any]]:
    pod = {"severity": "warning", "namespace": NAMESPACE, "job": CACHE_JOB, "pod": CACHE_POD}
    return [
        case("a healthy cache raises nothing", healthy_cache(90), quiet("89m", *CACHE_ALERTS)),
        case(
            "a full store that does not evict is healthy",
            healthy_cache(90, store="990x90", evictions="7x90"),
            quiet("89m", "MultinodeLLMCacheStoreFull"),
        ),
        case(
            "half the upstream requests fail",
            healthy_cache(30, errors="0+5x30"),
            [
                alert("MultinodeLLMCacheUpstreamErrors", "8m"),
                alert("MultinodeLLMCacheUpstreamErrors", "20m", {**pod, "node": "gpu-node-1"}),
            ],
        ),
        case(
            "a full store that keeps evicting",
            healthy_cache(90, store="990x90", evictions="0+1x90"),
            [
                alert("MultinodeLLMCacheStoreFull", "5m"),
                alert(
                    "MultinodeLLMCacheStoreFull",
                    "30m",
                    {**pod, "node": "gpu-node-1", "endpoint": "http", "container": "cache"},
                ),
            ],
        ),
    ]


def download_cases(job: str) -> list[dict[str, Any]]:
    def failed(values: str) -> list[Series]:
        where = {"namespace": NAMESPACE, "job_name": job, "job": "kube-state-metrics"}
        return [series("kube_job_status_failed", where, values)]

    fired = {"severity": "warning", "namespace": NAMESPACE, "job_name": job}
    return [
        case(
            "a download Job without failed pods",
            failed("0x20"),
            quiet("15m", "MultinodeLLMDownloadJobFailed"),
        ),
        case(
            "a download Job with a failed pod",
            failed("0x5 1x15"),
            [
                alert("MultinodeLLMDownloadJobFailed", "4m"),
                alert("MultinodeLLMDownloadJobFailed", "8m", fired),
            ],
        ),
    ]


def unit_tests(download_job: str) -> dict[str, Any]:
    """The promtool test file, for rule files model.rules.yaml and cache.rules.yaml."""
    return {
        "rule_files": ["model.rules.yaml", "cache.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [*group_cases(), *cache_cases(), *download_cases(download_job)],
    }
