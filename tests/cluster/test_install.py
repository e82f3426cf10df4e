"""The README's install on real KServe (the chart's default release): Helm 4 brings up a PP=2 group
that answers through the predictor Service; killed pods heal; upgrades finish within their
timeout and roll the group once; uninstall keeps the model claim.

One real cluster and one install serve every test of this module, in order: the tests that kill
or upgrade come last.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import oracle
import pytest
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks
from realcluster import (
    Clusters,
    Installed,
    RealCluster,
    helm_history,
    install,
    record,
    serving_lock,
    wait_for,
)

NAMESPACE = "llm"


@pytest.fixture(scope="module")
def cluster(clusters: Clusters, tiny_model: Path) -> Iterator[RealCluster]:
    running = clusters.get(releases.default().version)
    running.model_claim(NAMESPACE, "models", tiny_model)
    yield running
    running.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture(scope="module")
def group(cluster: RealCluster) -> Iterator[Installed]:
    with serving_lock():
        yield install(cluster, "llm", NAMESPACE)


def test_kserve_made_a_head_and_a_worker_that_are_ready(group: Installed) -> None:
    assert group.ready("head")
    assert group.ready("worker")
    assert len(group.pods("head")) == 1
    assert len(group.pods("worker")) == 1


def test_the_readiness_job_completed(group: Installed) -> None:
    jobs = group.cluster.items("jobs", "-n", NAMESPACE)
    ready = [j for j in jobs if "-ready-" in j["metadata"]["name"]]
    assert ready, [j["metadata"]["name"] for j in jobs]
    assert all(j["status"].get("succeeded") == 1 for j in ready)


def test_models_lists_the_served_model(group: Installed) -> None:
    checks.check_models(group)


def test_a_chat_completion_comes_back_through_the_predictor_service(group: Installed) -> None:
    checks.check_streaming_chat(group)


def test_the_kserve_v2_routes_and_the_metrics_answer(group: Installed) -> None:
    checks.check_v2(group)
    checks.check_metrics(group)


def test_ray_shows_one_node_per_pod_with_one_gpu_each(group: Installed) -> None:
    group.check_ray(tensor=1)


def test_the_readiness_job_ends_on_this_group_and_only_on_its_spec(group: Installed) -> None:
    """The chart's readiness Job, as rendered for this release, run against the predictor Service
    from here: it ends for the group's own spec, and not for another one."""
    job = next(
        o for o in group.manifest() if o["kind"] == "Job" and "-ready-" in o["metadata"]["name"]
    )
    args = list(job["spec"]["template"]["spec"]["containers"][0]["args"])
    urls = [group.base_url]  # the Service's in-cluster names do not resolve on this machine
    spec = args[args.index("--group-spec") + 1]
    for asked, code in ((spec, 0), ("000000000000", 1)):
        argv = [sys.executable, "-m", "multinode_llm", "await-group", *urls, "--model",
                group.model, "--group-spec", asked, "--timeout", "60" if code == 0 else "3",
                "--interval", "1"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == code, done.stdout + done.stderr
    assert "not 000000000000" in done.stderr


def test_kserve_reports_the_group_as_its_release_does(group: Installed) -> None:
    """0.16.0-0.19.0 never report a multi-node group Ready (kserve-releases.yaml, never-ready):
    PredictorReady stays Unknown with both Deployments available."""
    release = releases.get(group.cluster.kserve)
    isvc = group.cluster.get("-n", NAMESPACE, f"inferenceservice/{group.isvc}")
    conditions = {c["type"]: c for c in isvc["status"]["conditions"]}
    if release.controller.readiness == "stuck":
        assert conditions["PredictorReady"]["status"] == "Unknown"
        assert "MinimumReplicasAvailable" in conditions["PredictorReady"]["reason"]
        assert conditions["Ready"]["status"] == "False"
    else:
        assert conditions["Ready"]["status"] == "True"


def test_real_kserve_made_what_the_emulation_says(group: Installed) -> None:
    assert oracle.differences(group, group.manifest()) == []


OPEN_THE_WAY_IN = (
    "traffic.ingress.enabled=true",
    "traffic.ingress.hosts[0]=llm.example.com",
    "traffic.httpRoute.enabled=true",
    "traffic.httpRoute.parentRefs[0].name=inference-gateway",
    "traffic.httpRoute.parentRefs[0].namespace=gateway-system",
)


def test_a_route_without_the_gateway_api_is_refused_before_anything_changes(
    group: Installed,
) -> None:
    """Without the Gateway API CRDs Helm cannot map an HTTPRoute, says so, and applies nothing:
    the release stays at its revision and the group keeps serving."""
    if group.cluster.has_crd("httproutes.gateway.networking.k8s.io"):
        pytest.skip("this cluster has the Gateway API CRDs already (a run before left them)")
    revisions = helm_history(group.cluster, group.release, NAMESPACE)
    result = group.upgrade(*OPEN_THE_WAY_IN, check=False)
    group.sets = group.sets[: -len(OPEN_THE_WAY_IN)]
    assert result.returncode != 0
    assert 'no matches for kind "HTTPRoute" in version "gateway.networking.k8s.io/v1"' in (
        result.stderr
    )
    assert helm_history(group.cluster, group.release, NAMESPACE) == revisions
    assert group.serves()


def test_the_way_in_is_admitted_and_opening_and_closing_it_rolls_nothing(
    group: Installed,
) -> None:
    """With the Gateway API CRDs (standard channel) installed, the real API server admits the
    Ingress and the HTTPRoute (its CEL rules included); both name the Service KServe made for the
    head, port 80 to the head's 8080, which answers; neither the upgrade that opens the way in nor
    the one that closes it rolls a pod."""
    group.cluster.install_gateway_api()
    try:
        heads, workers = set(group.replica_sets("head")), set(group.replica_sets("worker"))
        group.upgrade(*OPEN_THE_WAY_IN)
        name = f"{group.isvc}-api"
        route = group.cluster.get("httproute", "-n", NAMESPACE, name)
        ingress = group.cluster.get("ingress", "-n", NAMESPACE, name)
        [rule] = route["spec"]["rules"]
        assert [m["path"]["value"] for m in rule["matches"]] == ["/v1", "/v2"]
        [ref] = rule["backendRefs"]
        backends = {
            p["backend"]["service"]["name"] for p in ingress["spec"]["rules"][0]["http"]["paths"]
        }
        assert backends == {ref["name"]} == {f"{group.isvc}-predictor"}
        service = group.cluster.get("service", "-n", NAMESPACE, ref["name"])
        ports = {(p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
        assert (ref["port"], 8080) in ports
        assert group.serves()
        group.sets = group.sets[: -len(OPEN_THE_WAY_IN)]
        group.upgrade()
        assert group.cluster.items("httproutes,ingresses", "-n", NAMESPACE) == []
        assert (set(group.replica_sets("head")), set(group.replica_sets("worker"))) == (
            heads,
            workers,
        )
    finally:
        group.cluster.uninstall_gateway_api()


def test_helm4_default_wait_reads_kserve_readiness(group: Installed) -> None:
    """Helm 4's `--wait` (kstatus) calls the InferenceService InProgress while its Ready is not
    True: on the releases that never set it, a no-op upgrade with it runs into its timeout, which
    is why the README gives Helm 4 `--wait=legacy`."""
    release = releases.get(group.cluster.kserve)
    result = group.upgrade(wait=["--wait=watcher"], timeout="45s", check=False)
    if release.controller.readiness == "stuck":
        assert result.returncode != 0
        assert f"InferenceService/{NAMESPACE}/{group.isvc} not ready" in result.stderr
    else:
        assert result.returncode == 0, result.stderr


def test_a_killed_worker_heals(group: Installed) -> None:
    """The head's own watch sees the worker's raylet refuse connections and exits 1 (not vLLM's
    executor, which takes tens of seconds); kubelet restarts both, and they form again."""
    took = group.heals_after_killing("worker")
    record(f"KServe {group.cluster.kserve}", "killed worker -> serving again", took)
    assert group.last_exit("head")["exitCode"] == 1
    last = group.log("head", previous=True).splitlines()[-1]
    assert "exit 1: lost worker " in last, last
    group.check_ray(tensor=1)


def test_a_killed_head_heals(group: Installed) -> None:
    """The worker leaves as soon as its head's GCS refuses connections, or its restarted
    supervisor shows a new Ray cluster, and joins the new head."""
    took = group.heals_after_killing("head")
    record(f"KServe {group.cluster.kserve}", "killed head -> serving again", took)
    last = group.log("worker", previous=True).splitlines()[-1]
    assert "refuses connections" in last or "restarted (a new Ray cluster)" in last, last
    group.check_ray(tensor=1)  # the worker rejoined the new head


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        # The runtime's image and the InferenceService's args at once: Helm applies the
        # InferenceService first (kinds it does not know go in alphabetical order), so a
        # reconcile between the two would roll the group with the old runtime, then again.
        (
            ("image.tag=0.1.0-rc1", "vllm.args={--max-model-len=256,--max-num-seqs=8}"),
            "image.tag and vllm.args (runtime and ISVC)",
        ),
        (("parallelism.pipeline=3",), "parallelism.pipeline 2 -> 3"),
    ],
)
def test_an_upgrade_finishes_in_its_timeout_and_rolls_the_group_once(
    group: Installed, changes: tuple[str, ...], what: str
) -> None:
    heads = set(group.replica_sets("head"))
    started = time.monotonic()
    group.upgrade(*changes, timeout="15m")
    record(f"KServe {group.cluster.kserve}", f"helm4 upgrade: {what}", time.monotonic() - started)
    rolled = set(group.replica_sets("head")) - heads
    assert len(rolled) == 1, f"the head rolled {len(rolled)} times: {sorted(rolled)}"
    assert group.serves()


def test_uninstall_keeps_the_model_claim(group: Installed) -> None:
    group.cluster.helm("uninstall", group.release, "--namespace", NAMESPACE, "--wait",
                       "--timeout", "5m")  # fmt: skip
    claims = [c["metadata"]["name"] for c in group.cluster.items("pvc", "-n", NAMESPACE)]
    assert "models" in claims
    # Helm waits for what it deleted; the garbage collector then takes what KServe made of it.
    wait_for(
        lambda: not group.cluster.items("pods", "-n", NAMESPACE),
        120,
        "the garbage collector to remove the group's pods",
    )
    assert "models" in [c["metadata"]["name"] for c in group.cluster.items("pvc", "-n", NAMESPACE)]
