"""The group benchmark's scenarios and goals, checked on made-up measurements (no vLLM, no pods).

Which group gets which fault, what ``--quick`` leaves out and says so, each goal's verdict
against the baseline of its own run, and the tables the report and the goals summary print.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as entry
from bench import group, report
from bench.figures import Load

PLAIN_S = [50.0, 52.0, 48.0]


def _start(ready: float, worker: str = "10.0.0.3") -> group.GroupStart:
    """A cold start's events (wall clock), the head pod Ready ``ready`` s after the first one."""
    t0 = 1000.0
    events = {
        "first container started": t0,
        "head container started": t0,
        "worker container started": t0 + 0.1,
        "vLLM started": t0 + 1.0,
        f"worker {worker} joined (its supervisor)": t0 + 5.0,
        f"head saw worker {worker}": t0 + 6.0,
        "engine answers (bench poll)": t0 + ready - 1.0,
        "/ready 200 (bench poll)": t0 + ready - 0.5,
        "head pod Ready (kubelet)": t0 + ready,
    }
    return group.GroupStart(events)


def _recovery(serving: float, fault: str) -> group.Recovery:
    stages = {
        "head pod NotReady (kubelet)": 0.6,
        "head restarted": 0.7,
        "head container started": 0.7,
        "worker 10.0.0.3 joined (its supervisor)": 2.0,
        "engine answers (bench poll)": serving - 2.0,
        "head pod Ready again (kubelet)": serving - 1.0,
        "serving again": serving,
    }
    if fault == "worker":
        stages["head /ready 503"] = 0.5
    return group.Recovery(stages, "Error")


def _measured(
    cold: float, faults: dict[str, float], deployments: tuple[float, float] | None
) -> group.Measured:
    runs = group.Measured(
        starts=[_start(cold), _start(cold + 2.0), _start(cold - 2.0)],
        throughput=[30.0, 31.0, 29.0],
        faults={fault: _recovery(seconds, fault) for fault, seconds in faults.items()},
    )
    if deployments:
        runs.deployments = [_start(deployments[0]), _start(deployments[1])]
        runs.published = {"entries": 1, "files": 12, "bytes": 1e6, "waited_s": 3.5}
    return runs


def _figures(options: group.Options, measured: dict[str, group.Measured]) -> list[dict[str, Any]]:
    plain = group.Plain(seconds=PLAIN_S, throughput=[90.0] * 3, warm=27.0)
    if "plain-warm" not in options.scenarios:
        plain.warm = None
    figures = group._figures(options, measured, plain, Load(0.1, 0.2))
    return [json.loads(json.dumps(figure.record())) for figure in figures]


def _by_name(figures: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(figure for figure in figures if figure["name"] == name)


def test_each_fault_gets_a_cold_start_of_its_own_the_worker_last() -> None:
    options = group.Options()
    assert options.repetitions == 3
    assert [options.fault_of(r) for r in range(3)] == ["restart", "head", "worker"]
    fewer = group.Options(repetitions=4, scenarios=("head", "worker"))
    assert [fewer.fault_of(r) for r in range(4)] == [None, None, "head", "worker"]
    with pytest.raises(ValueError, match=r"3 faults .* need as many group starts"):
        group.Options(repetitions=2)
    with pytest.raises(ValueError, match=r"scenarios \['crash'\]"):
        group.Options(scenarios=("crash",))


def test_quick_run_is_one_start_per_executor_whose_worker_is_killed() -> None:
    options = entry._group_options(entry._parse(["--quick"]))
    assert options.repetitions == 1
    assert options.scenarios == group.QUICK_SCENARIOS == ("worker", "plain-warm")
    assert options.fault_of(0) == "worker"
    assert options.throughput_requests == 32
    # Asking for more faults in a quick run gets as many starts.
    more = entry._group_options(entry._parse(["--quick", "--scenarios", "head,restart"]))
    assert (more.repetitions, more.faults) == (2, ("restart", "head"))
    full = entry._group_options(entry._parse(["--only", "group", "--executors", "mp"]))
    assert (full.repetitions, full.scenarios, full.executors) == (3, group.SCENARIOS, ("mp",))


def test_unknown_scenarios_and_too_few_repetitions_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        entry._parse(["--scenarios", "worker,crash"])
    assert "unknown scenario(s) crash: choose from restart, head, worker" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        entry._parse(["--scenarios", "worker,head", "--repetitions", "1"])
    assert "one per fault (head, worker)" in capsys.readouterr().err


def test_every_goal_is_judged_against_the_baseline_of_the_same_run() -> None:
    measured = {
        "ray": _measured(55.0, {"restart": 30.0, "head": 35.0, "worker": 25.0}, (55.0, 40.0)),
        "mp": _measured(52.0, {"restart": 36.0, "head": 29.0, "worker": 28.0}, (52.0, 34.0)),
    }
    figures = _figures(group.Options(), measured)
    plain = 50.0  # the median of PLAIN_S
    startup = _by_name(figures, "PP=2 Ray group: first container started -> head pod Ready")
    assert startup["goal"]["limit"] == 3.0  # Ray's goal is mp's now
    assert (startup["difference"], startup["met"]) == (5.0, False)
    restart = _by_name(
        figures, "Ray: every container killed (pods kept, warm cache) -> group serving again"
    )
    assert restart["baseline"] == 55.0  # the Ray group's own cold start, not plain vLLM
    assert restart["ratio"] == pytest.approx(30 / 55)
    assert restart["met"] is True
    assert (
        _by_name(
            figures, "mp: every container killed (pods kept, warm cache) -> group serving again"
        )["met"]
        is False
    )  # 36 / 52 = 0.69 > 0.65
    head = _by_name(figures, "Ray: head killed -> group serving again")
    assert (head["baseline"], head["ratio"], head["met"]) == (plain, 0.7, False)
    worker = _by_name(figures, "mp: worker killed -> group serving again")
    assert (worker["ratio"], worker["met"]) == (0.56, True)
    second = _by_name(
        figures,
        "mp: second deployment of the same model (shared compile cache) -> head pod Ready",
    )
    assert (second["baseline"], second["ratio"], second["met"]) == (52.0, 34 / 52, True)
    compared = _by_name(figures, "worker killed -> group serving again: mp against Ray")
    assert compared["ratio"] == pytest.approx(28 / 25)
    assert compared["met"] is False
    warm = _by_name(figures, "plain vLLM: restart on the same VLLM_CACHE_ROOT -> lists the model")
    assert (warm["value"], warm["baseline"]) == (27.0, PLAIN_S[-1])
    assert warm["config"]["env"] == group._plain_env()
    assert all(not figure["skipped"] for figure in figures)
    # Each fault names its phases: the stages and the restarted containers' phases in one table.
    assert head["config"]["scenario"] == "head"
    assert "worker 10.0.0.3 joined (its supervisor)" in head["config"]["stages_s"]


def test_quick_run_says_what_it_left_out_and_keeps_its_goals() -> None:
    options = group.Options(repetitions=1, scenarios=group.QUICK_SCENARIOS, quick=True)
    measured = {executor: _measured(52.0, {"worker": 28.0}, None) for executor in group.EXECUTORS}
    figures = _figures(options, measured)
    left = [figure for figure in figures if figure["skipped"]]
    assert {figure["name"].split(": ", 1)[1] for figure in left} == {
        "every container killed (pods kept, warm cache) -> group serving again",
        "head killed -> group serving again",
        "second deployment of the same model (shared compile cache) -> head pod Ready",
    }
    for figure in left:
        assert figure["skipped"].startswith("the quick run leaves it out"), figure
        assert figure["goal"]
        assert (figure["met"], figure["value"]) == (None, None)
    assert not _by_name(
        figures, "plain vLLM: restart on the same VLLM_CACHE_ROOT -> lists the model"
    )["skipped"]
    text = report.goals_text(figures)
    lines = {line.split("  ")[0]: line for line in text.splitlines()[3:]}
    assert "met" in lines["a killed worker serving again <= 0.6x a plain cold start"]
    assert "0.56x" in lines["a killed worker serving again <= 0.6x a plain cold start"]
    assert "not measured" in lines["a killed head serving again <= 0.6x a plain cold start"]


def test_a_failed_scenario_is_recorded_and_the_rest_stays() -> None:
    runs = _measured(52.0, {"worker": 28.0}, None)
    group._attempt(runs, "head", lambda line: None, "mp", lambda: _raise("no worker restarted"))
    options = group.Options(repetitions=2, scenarios=("head", "worker"))
    figures = _figures(options, {"mp": runs})
    head = _by_name(figures, "mp: head killed -> group serving again")
    assert head["skipped"] == "FAILED: no worker restarted"
    assert not _by_name(figures, "mp: worker killed -> group serving again")["skipped"]


def _raise(message: str) -> None:
    raise RuntimeError(message)


def test_report_prints_the_goals_each_fault_and_the_deployments(tmp_path: Path) -> None:
    measured = {
        "ray": _measured(55.0, {"restart": 30.0, "head": 35.0, "worker": 25.0}, (55.0, 40.0)),
        "mp": _measured(52.0, {"restart": 36.0, "head": 29.0, "worker": 28.0}, (52.0, 34.0)),
    }
    figures = _figures(group.Options(), measured)
    results = {
        "generated": "now",
        "command": "python -m bench --only group",
        "seconds": 1.0,
        "machine": {"cores": 2, "memory_gib": 24, "python": "3.12"},
        "figures": figures,
    }
    report.write(results, tmp_path)
    written = (tmp_path / "REPORT.md").read_text()
    printed = report.executors_text(figures)
    for text in (written, printed):
        assert "Stages after head killed in the mp group" in text
        assert (
            "Stages after every container killed (pods kept, warm cache) in the Ray group" in text
        )
        assert "| worker joined (its supervisor) | 2.0 |" in text  # the address is left out
        assert "Phases of the mp group's first and second deployment" in text
        assert "| head pod Ready (kubelet) | 52.0 | 34.0 |" in text
        assert (
            "| restart with a warm cache | 36.0 s | 30.0 s | mp: 52.0 s (the mp group's cold "
            "start to Ready); Ray: 55.0 s (the Ray group's cold start to Ready) | 1.20x | a "
            "restart with a warm cache <= 0.65x the group's cold start: mp MISSED, Ray met |"
        ) in text
    goals = report.goals_text(figures)
    assert goals.startswith("Goals:")
    row = next(line for line in goals.splitlines() if "PP=2 Ray group: first container" in line)
    assert re.split(r"\s{2,}", row.strip()) == [
        "a PP=2 group Ready within 3 s of one plain vLLM server's start",
        "MISSED",
        "+5.0 s",
        "<= +3 s",
        "PP=2 Ray group: first container started -> head pod Ready",
    ]
    assert (tmp_path / "recovery.png").read_bytes()[:4] == b"\x89PNG"
