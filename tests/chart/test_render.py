"""The scenario matrix: every shipped values file rendered under Helm 3 and Helm 4."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from multinode_llm_testing.chartlib import (
    accelerators,
    deep_merge,
    helm,
    install_dry_run,
    kserve_release,
    load_values_file,
    scenarios,
    template,
)

SCENARIOS = scenarios()
# Scenarios that serve a model through KServe's InferenceService: a release may run only
# the model cache (test_cache.py) or serve on LeaderWorkerSet instead (test_lws.py).
MODEL_SCENARIOS = {
    n: p
    for n, p in SCENARIOS.items()
    if load_values_file(p).get("model", {}).get("uri")
    and load_values_file(p).get("group", {}).get("backend", "kserve") == "kserve"
}
# Every vendor's GPU resource the chart knows (accelerators.yaml).
KNOWN_GPUS = {entry["resourceName"] for entry in accelerators()["accelerators"].values()}


def chart_values(path: Path) -> dict[str, Any]:
    """The values a scenario sets over the chart defaults that these assertions read."""
    given = load_values_file(path)
    return {
        "tensor": given.get("parallelism", {}).get("tensor", 1),
        "pipeline": given.get("parallelism", {}).get("pipeline", 2),
        "gpu": given.get("gpu", {}).get("resourceName", "nvidia.com/gpu"),
        "uri": given["model"]["uri"],
        "release": kserve_release(str(given.get("kserve", {}).get("version", ""))),
        "scope": given.get("runtime", {}).get("scope", "Namespace"),
        "mp": given.get("group", {}).get("executor") == "mp",
        # the scenario's own serving image, else NVIDIA's (accelerators.yaml)
        "image": given.get("image", {}).get("repository") or "ghcr.io/multinode-llm/multinode-llm",
    }


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, SCENARIOS[request.param]


@pytest.fixture(params=sorted(MODEL_SCENARIOS))
def model_scenario(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, MODEL_SCENARIOS[request.param]


def test_the_scenario_matrix_is_not_empty() -> None:
    assert len(MODEL_SCENARIOS) >= 5, MODEL_SCENARIOS
    assert set(SCENARIOS) - set(MODEL_SCENARIOS) == {"model-cache", "lws"}


def test_head_and_every_worker_request_and_limit_exactly_tensor_gpus(
    major: str, model_scenario: tuple[str, Path]
) -> None:
    _, path = model_scenario
    want = chart_values(path)
    isvc = template(major, [path]).one("InferenceService")
    predictor = isvc["spec"]["predictor"]
    [worker] = predictor["workerSpec"]["containers"]
    for resources in (predictor["model"]["resources"], worker["resources"]):
        # strings, as KServe's defaulting webhook writes quantities back: no Argo CD diff
        assert resources["requests"][want["gpu"]] == str(want["tensor"])
        assert resources["limits"][want["gpu"]] == str(want["tensor"])
        gpu_keys = {k for part in resources.values() for k in part if k in KNOWN_GPUS}
        assert gpu_keys <= {want["gpu"]}, "two GPU types on one container"
    assert predictor["workerSpec"]["pipelineParallelSize"] == want["pipeline"]
    assert predictor["workerSpec"]["tensorParallelSize"] == want["tensor"]


def test_the_isvc_is_one_head_in_raw_mode_with_the_autoscaler_class_of_its_kserve(
    major: str, model_scenario: tuple[str, Path]
) -> None:
    _, path = model_scenario
    want = chart_values(path)
    isvc = template(major, [path]).one("InferenceService")
    annotations = isvc["metadata"]["annotations"]
    release = want["release"]
    assert annotations["serving.kserve.io/deploymentMode"] == release["deploymentMode"]
    assert annotations["serving.kserve.io/autoscalerClass"] == release["autoscalerClass"]
    predictor = isvc["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 1)
    assert predictor["model"]["storageUri"].split("://")[0] in {"pvc", "oci"}


def test_the_runtime_runs_the_supervisor_and_the_isvc_carries_the_model_args(
    major: str, model_scenario: tuple[str, Path]
) -> None:
    _, path = model_scenario
    want = chart_values(path)
    render = template(major, [path])
    kind = "ClusterServingRuntime" if want["scope"] == "Cluster" else "ServingRuntime"
    runtime = render.one(kind)
    [head] = runtime["spec"]["containers"]
    [worker] = runtime["spec"]["workerSpec"]["containers"]
    assert (head["name"], head["command"], head["args"]) == (
        "kserve-container",
        ["multinode-llm"],
        ["head"],
    )
    assert (worker["name"], worker["command"], worker["args"]) == (
        "worker-container",
        ["multinode-llm"],
        ["worker"],
    )
    for container in (head, worker):
        assert container["image"].startswith(f"{want['image']}:")
        assert {
            p: container[f"{p}Probe"]["httpGet"] for p in ("startup", "readiness", "liveness")
        } == {
            "startup": {"path": "/startup", "port": 8081},
            "readiness": {"path": "/ready", "port": 8081},
            "liveness": {"path": "/live", "port": 8081},
        }
        names = [e["name"] for e in container["env"]]
        group_env = {"MULTINODE_LLM_EXECUTOR", "MASTER_PORT"} if want["mp"] else {"RAY_PORT"}
        assert {"POD_IP", "POD_NAME", "POD_NAMESPACE", "GROUP_WAIT_TIMEOUT"} | group_env <= set(
            names
        )
        assert len(names) == len(set(names)), f"duplicate env in {container['name']}: {names}"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    shm = next(v for v in runtime["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"
    args = render.one("InferenceService")["spec"]["predictor"]["model"]["args"]
    assert args[0] == "--served-model-name"
    assert (
        render.one("InferenceService")["spec"]["predictor"]["model"]["runtime"]
        == runtime["metadata"]["name"]
    )


def test_hf_models_are_staged_by_ordinary_objects_the_group_waits_for(major: str) -> None:
    """No hook a tool may delete: the claim and the Job are ordinary objects (Argo CD wave -1,
    before the InferenceService's wave 0); the head waits for the snapshot MODEL_REVISION names."""
    render = template(major, [SCENARIOS["hf-tp2-pp2"]])
    claim, job = render.one("PersistentVolumeClaim"), render.one("Job", "model-download")
    isvc = render.one("InferenceService")
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == (
        f"pvc://{claim['metadata']['name']}/models/Qwen/Qwen2.5-0.5B-Instruct"
    )
    assert {"name": "MODEL_REVISION", "value": "main"} in model["env"]
    claim_ann, job_ann = claim["metadata"]["annotations"], job["metadata"]["annotations"]
    for given in (claim_ann, job_ann):
        assert not any(key.endswith(("/hook", "/hook-delete-policy")) for key in given)
        assert given["argocd.argoproj.io/sync-wave"] == "-1"
    assert isvc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "0"
    assert claim_ann["helm.sh/resource-policy"] == "keep"
    assert claim_ann["argocd.argoproj.io/sync-options"] == "Prune=false,Delete=false"
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "stage",
        "hf://Qwen/Qwen2.5-0.5B-Instruct",
        "--into",
        "/mnt/models/models/Qwen/Qwen2.5-0.5B-Instruct",
    ]
    assert "HF_ENDPOINT" not in {e["name"] for e in container["env"]}


def test_the_volume_is_not_kept_when_asked(major: str) -> None:
    values = {**load_values_file(SCENARIOS["hf-tp2-pp2"])}
    values["model"] = {**values["model"], "storage": {"keepOnUninstall": False}}
    claim = template(major, values=values).one("PersistentVolumeClaim")
    annotations = claim["metadata"]["annotations"]
    assert "helm.sh/resource-policy" not in annotations
    # Pruned after the InferenceService has left it: in its own wave the sync would wait for ever.
    assert annotations["argocd.argoproj.io/sync-options"] == "PruneLast=true"


def test_the_download_goes_through_the_cache_with_the_token_from_a_secret(major: str) -> None:
    render = template(major, [SCENARIOS["hf-gated-cache"]])
    assert render.of_kind("PersistentVolumeClaim") == [], "an existing claim must not be created"
    [container] = render.one("Job", "model-download")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_ENDPOINT"] == "http://hub-multinode-llm-cache.model-cache.svc.cluster.local:8090"
    assert env["HF_HUB_DISABLE_XET"] == "1"
    # The token comes from the Secret as a file, never as an env value.
    assert "HF_TOKEN" not in env
    mount = next(m for m in container["volumeMounts"] if m["name"] == "hf-token")
    assert env["HF_TOKEN_PATH"] == mount["mountPath"] + "/token"
    pod = render.one("Job", "model-download")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["hf-token"]["secret"]["secretName"] == "hf-token"
    assert volumes["hf-token"]["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert "be673f326cab4cd22ccfef76109faf68e41aa5f1" in container["args"][1]


def test_custom_gpu_types_are_declared_on_both_runtime_and_isvc(major: str) -> None:
    render = template(major, [SCENARIOS["custom-gpu"]])
    want = '["nvidia.com/mig-3g.40gb","rdma/rdma_shared_device_a"]'
    runtime = render.one("ServingRuntime")
    assert runtime["spec"]["annotations"]["serving.kserve.io/gpu-resource-types"] == want
    assert (
        render.one("InferenceService")["metadata"]["annotations"][
            "serving.kserve.io/gpu-resource-types"
        ]
        == want
    )


def test_the_network_policy_opens_the_group_to_itself_and_http_to_clients(major: str) -> None:
    policies = template(major, [SCENARIOS["pvc-namespaced"]]).of_kind("NetworkPolicy")
    policy = next(p for p in policies if p["metadata"]["name"] == "llm-multinode-llm")
    no_ingress = next(
        p for p in policies if p["metadata"]["name"] == "llm-multinode-llm-no-ingress"
    )
    assert "ingress" not in no_ingress["spec"]
    assert no_ingress["spec"]["policyTypes"] == ["Ingress"]
    group = {"serving.kserve.io/inferenceservice": "llm-multinode-llm"}
    assert policy["spec"]["podSelector"]["matchLabels"] == group
    within, clients = policy["spec"]["ingress"]
    assert within == {"from": [{"podSelector": {"matchLabels": group}}]}
    assert {p["port"] for p in clients["ports"]} == {8080, 8081}
    assert clients["from"][0] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}
    }
    assert clients["from"][1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"


def test_helm_3_and_helm_4_render_the_same_objects(scenario: tuple[str, Path]) -> None:
    _, path = scenario
    for major in ("helm3", "helm4"):
        if not helm(major).exists():
            pytest.skip(f"{major} missing: run `bash hack/install-tools.sh`")
    assert template("helm3", [path]).documents() == template("helm4", [path]).documents()


def test_rendering_twice_gives_identical_bytes(major: str, scenario: tuple[str, Path]) -> None:
    _, path = scenario
    first, second = template(major, [path]), template(major, [path])
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_the_done_command_renders_two_gpus_on_the_head_and_the_one_worker(major: str) -> None:
    render = template(
        major,
        values={
            "model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
            "parallelism": {"tensor": 2, "pipeline": 2},
        },
        release="x",
        namespace="default",
    )
    predictor = render.one("InferenceService")["spec"]["predictor"]
    assert predictor["model"]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert predictor["workerSpec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert predictor["workerSpec"]["pipelineParallelSize"] == 2
    assert predictor["model"]["args"] == ["--served-model-name", "x"]


def test_the_notes_give_the_port_forward_and_warn_about_rolling_updates(helm4: str) -> None:
    values = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "parallelism": {"tensor": 2}}
    recreate = install_dry_run(helm4, values=values)
    assert recreate.returncode == 0, recreate.stderr
    notes = recreate.stdout.split("NOTES:", 1)[1]
    assert "port-forward svc/llm-multinode-llm-predictor 8080:80" in notes
    assert '"model": "llm"' in notes
    assert "WARNING" not in notes
    rolling = install_dry_run(
        helm4, values=deep_merge(values, {"strategy": {"type": "RollingUpdate"}})
    )
    assert "second full set of 4 nvidia.com/gpu" in rolling.stdout.split("NOTES:", 1)[1]


def test_the_notes_say_how_to_see_whether_the_model_fits_its_volume(helm4: str) -> None:
    values = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}}
    notes = install_dry_run(helm4, values=values).stdout.split("NOTES:", 1)[1]
    # the stager's log line (multinode_llm/staging/room.py) and its refusal's value
    assert '"room:" line says what the commit needs and what is free' in notes
    assert "naming the model.storage.size that holds it" in notes
    size = "jsonpath='{.status.capacity.storage}'"
    assert f"kubectl -n serving get pvc llm-multinode-llm-model -o {size}" in notes


def test_helm_test_runs_the_small_cache_image_scheduled_as_the_head(major: str) -> None:
    """The serving image is several GB (vLLM, CUDA): helm test's short script runs on the cache
    image the Jobs run, wherever the head may run (a tainted GPU node, say)."""
    placement = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
                    ]
                }
            }
        },
    }
    values = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "head": placement}
    render = template(major, values=values)
    [pod] = render.of_kind("Pod")
    [chat] = pod["spec"]["containers"]
    job = render.one("Job", "model-download")
    [stage] = job["spec"]["template"]["spec"]["containers"]
    assert chat["image"] == stage["image"]
    assert chat["image"].startswith("ghcr.io/multinode-llm/multinode-llm-cache:")
    assert chat["imagePullPolicy"] == stage["imagePullPolicy"]
    for field in ("nodeSelector", "tolerations", "affinity"):
        assert pod["spec"][field] == placement[field], field
    head = render.one("InferenceService")["spec"]["predictor"]
    assert {f: head[f] for f in placement} == placement


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """The two routes the helm test script calls, as vLLM's OpenAI server answers them."""

    def do_GET(self) -> None:
        self.answer({"data": [{"id": "llm"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        choice = {"message": {"role": "assistant", "content": "Hello there, friend, hi!"}}
        self.answer({"choices": [choice], "usage": {"completion_tokens": 6}})

    def answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # quiet
        pass


def test_the_helm_test_script_needs_nothing_but_python_s_standard_library(helm4: str) -> None:
    """So the cache image (or any Python) runs it: it is run here with site-packages off (-S),
    against a stand-in of vLLM's two routes, with the pod's env."""
    render = template(helm4, values={"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}})
    [chat] = render.one("Pod")["spec"]["containers"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {e["name"]: e["value"] for e in chat["env"]}
        env["BASE_URL"] = f"http://127.0.0.1:{server.server_port}"
        assert chat["command"] == ["python3", "-c"]
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", *chat["args"]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert "llm answered: 'Hello there, friend, hi!'" in proc.stdout
