"""The chart's Argo CD health check for its InferenceService.

files/argocd-health-inferenceservice.lua, run by a real Lua 5.1 (lupa: Argo CD's gopher-lua
speaks 5.1) on the status each KServe release writes for the same group, as the local emulation
of KServe's status code computes it (runtime/.../local/kserve/status.py, itself checked against
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


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Argo CD's contract: the script sees the object as `obj` and returns {status, message}."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    result = runtime.execute(Path(CHECK).read_text())
    return str(result["status"]), str(result["message"])


def to_lua(runtime: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return runtime.table_from({k: to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([to_lua(runtime, v) for v in value])
    return value


def isvc(version: str, head: dict[str, Any], worker: dict[str, Any], **model: Any) -> dict:
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
