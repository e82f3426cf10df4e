"""The chart's Argo CD health check for its InferenceService.

files/argocd-health-inferenceservice.lua, run by a real Lua 5.1 (lupa: Argo CD's gopher-lua
speaks 5.1) without the libraries Argo CD withholds from a check in argocd-cm, on the status each
KServe release writes for the same group, as the local emulation of KServe's status code computes
it (runtime/.../local/kserve/status.py, itself checked against
KServe's own tests in tests/kserve).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from multinode_llm_local.k8s import deployment_status
from multinode_llm_local.kserve import releases, status
from multinode_llm_testing.chartlib import CHART, kserve_releases

lua51 = pytest.importorskip("lupa.lua51", reason="lupa is installed by tox -e chart")
CHECK = CHART / "files" / "argocd-health-inferenceservice.lua"
TABLE = kserve_releases()
RELEASES = [v for v, r in TABLE["releases"].items() if r["status"] != "unverified"]
HEALTHY = deployment_status(1, 1, complete=True, elapsed_s=60, deadline_s=600)
STARTING = deployment_status(1, 0, complete=False, elapsed_s=60, deadline_s=600)
LOADING_LONG = deployment_status(1, 0, complete=False, elapsed_s=1200, deadline_s=600)


# What Argo CD's Lua VM lacks for a health check from argocd-cm (util/lua/lua.go at v3.5.1,
# ``runLuaWithResourceActionParameters``: only package, base, table and a safe os are opened;
# ``string`` and the rest come only with resource.customizations.useOpenLibs, which also opens
# io and the whole of os). Strings there have no metatable either, so ``s:find`` fails as well.
ARGO_CD_SANDBOX = """
getmetatable("").__index = nil
string, math, io, debug, coroutine = nil, nil, nil, nil, nil
"""


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Argo CD's contract: the script sees the object as `obj` and returns {status, message}, in
    Argo CD's sandbox."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    runtime.execute(ARGO_CD_SANDBOX)
    result = runtime.execute(Path(CHECK).read_text())
    return str(result["status"]), str(result["message"])


def to_lua(runtime: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return runtime.table_from({k: to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([to_lua(runtime, v) for v in value])
    return value


def isvc(
    version: str, head: dict[str, Any], worker: dict[str, Any], **model: Any
) -> dict[str, Any]:
    conditions = status.conditions(releases.get(version), head, worker)
    listed = [{"type": kind, **value} for kind, value in conditions.items()]
    return {"status": {"conditions": listed, **({"modelStatus": model} if model else {})}}


@pytest.mark.parametrize("version", RELEASES)
def test_a_serving_group_is_healthy_on_every_release(version: str) -> None:
    state, message = health(isvc(version, HEALTHY, HEALTHY))
    assert state == "Healthy", message


@pytest.mark.parametrize("version", RELEASES)
def test_a_starting_group_is_progressing(version: str) -> None:
    assert health(isvc(version, STARTING, STARTING))[0] == "Progressing"
    assert health(isvc(version, HEALTHY, STARTING))[0] == "Progressing"


@pytest.mark.parametrize("version", RELEASES)
def test_a_big_model_past_kserves_progress_deadline_is_not_degraded(version: str) -> None:
    assert health(isvc(version, LOADING_LONG, HEALTHY))[0] == "Progressing"


def test_a_head_that_fails_to_load_is_degraded() -> None:
    failed = {
        "transitionStatus": "InProgress",
        "states": {"targetModelState": "FailedToLoad", "activeModelState": ""},
        "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "exit 1"},
    }
    state, message = health(isvc("0.19.0", STARTING, HEALTHY, **failed))
    assert state == "Degraded"
    assert "FailedToLoad" in message


def test_no_status_yet_is_progressing() -> None:
    assert health({"metadata": {"name": "x"}})[0] == "Progressing"


def test_argo_cds_own_check_would_call_a_serving_group_on_0_19_progressing() -> None:
    """Why the chart ships its own: the stuck PredictorReady of 0.16-0.19 is not True."""
    conditions = status.conditions(releases.get("0.19.0"), HEALTHY, HEALTHY)
    assert conditions["PredictorReady"]["status"] == "Unknown"
    assert conditions["Ready"]["status"] != "True"


def failed_create(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with the ReplicaFailure a quota or an admission refusal gives a Deployment."""
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": "pods is forbidden: exceeded quota"}  # fmt: skip
    return {**status, "conditions": [*status["conditions"], failure]}


@pytest.mark.parametrize("version", ["0.20.0"])
def test_pods_the_cluster_refuses_to_create_are_degraded(version: str) -> None:
    """Where KServe passes the Deployments' ReplicaFailure on, with their own reasons (0.20;
    0.15 reads only Available, 0.16-0.19 fold the reasons of the conditions listed before)."""
    refused = failed_create(STARTING)
    state, message = health(isvc(version, refused, refused))
    assert state == "Degraded", message
    assert "FailedCreate" in message


@pytest.mark.parametrize(
    "reason",
    [
        "InvalidGPUAllocation",
        "predictor-container: MinimumReplicasUnavailable, worker-container: FailedCreate",
    ],
)
def test_a_reason_that_stays_until_someone_acts_is_degraded(reason: str) -> None:
    """KServe's own reasons whole, and a Deployment's inside KServe's joined reason of two."""
    conditions = [{"type": "PredictorReady", "status": "False", "reason": reason}]
    state, message = health({"status": {"conditions": conditions}})
    assert state == "Degraded", message
    assert reason in message


def test_the_check_needs_no_library_argo_cd_withholds() -> None:
    """The sandbox is real: a script that searched a string would fail in it, as in Argo CD."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(ARGO_CD_SANDBOX)
    with pytest.raises(lua51.LuaError):
        runtime.execute('return ("a"):find("a")')


# PredictorReady as real KServe 0.19.0 wrote it on the real cluster (tests/cluster, 5 Dec 2026):
# after a member restarted, Kubernetes moved each Deployment's changed Available condition after
# Progressing (SetDeploymentCondition appends what changed), and KServe's joined reason (the
# conditions listed before Progressing) became empty.
HEALED = {"type": "PredictorReady", "status": "Unknown", "reason": ""}
# A worker killed: its Deployment (then the head's) unavailable, Progressing still
# NewReplicaSetAvailable; the same for about a second at the start of every Recreate rollout.
MEMBER_DOWN = [
    "worker-container: NewReplicaSetAvailable",
    "predictor-container: NewReplicaSetAvailable, worker-container: NewReplicaSetAvailable",
]


def with_predictor(condition: dict[str, str]) -> dict[str, Any]:
    ingress = {"type": "IngressReady", "status": "False", "reason": "Predictor ingress not created"}
    return {"status": {"conditions": [ingress, condition]}}


def test_a_group_that_healed_in_place_is_healthy_again() -> None:
    state, message = health(with_predictor(HEALED))
    assert state == "Healthy", message


@pytest.mark.parametrize("reason", MEMBER_DOWN)
def test_a_member_down_is_progressing_not_degraded(reason: str) -> None:
    """Not Degraded: a rollout's first second reads the same, and a Degraded object fails an
    Argo CD sync; Argo CD's own Deployment check calls a lost pod Progressing too."""
    down = {"type": "PredictorReady", "status": "False", "reason": reason}
    state, message = health(with_predictor(down))
    assert state == "Progressing", message
    assert "restarts in place" in message
