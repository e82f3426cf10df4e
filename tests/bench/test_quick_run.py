"""`python -m bench --quick`: every benchmark once, vLLM's included (`tox -e bench-quick`, opt-in).

The serving benchmark (our endpoint and plain vLLM), and the group benchmark: a plain server, its
warm restart, and a PP=2 group per executor whose worker is then killed. No figure is judged
(figures live in bench/, measured on a quiet machine); this proves each is measured against its
baseline of the same run and reported side by side.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from records import check_report, check_results, figures, run_quick

# The quick run took 5.8 minutes on the shared 2-core machine, 9.5 at a load average of 7-11 (the
# group benchmark starts a plain server, a Ray and an mp group, and recovers both groups); plain
# vLLM's warm restart added 40-60 s (10 minutes at a load of 3-11, 4 of them waiting for the
# bench lock).
pytestmark = pytest.mark.timeout(1560)


@pytest.fixture(scope="module")
def quick_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    results = tmp_path_factory.mktemp("bench")
    return run_quick(results, timeout=1500), results


def test_quick_run_exits_zero(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, results = quick_run
    assert run.returncode == 0, run.stderr[-3000:]
    check_results(results, {"serving", "startup", "cache"})
    check_report(results)


def test_group_benchmark_measures_mp_ray_and_plain_side_by_side(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, results = quick_run
    found = figures(results)
    startup = [f for f in found if f["benchmark"] == "startup"]
    if all(figure["skipped"] for figure in startup):
        pytest.skip(f"the group benchmark was skipped: {startup[0]['skipped']}")
    rows: dict[str, set[str]] = {}
    for figure in found:
        config = figure["config"]
        if "row" in config and config["executor"] in ("mp", "ray"):
            rows.setdefault(config["row"], set()).add(config["executor"])
            assert figure["baseline"] > 0, figure  # the plain server of the same run
    assert rows == {
        "start-up to Ready": {"mp", "ray"},
        "recovery after a killed worker": {"mp", "ray"},
        "serving throughput": {"mp", "ray"},
    }
    compared = [f for f in found if f["name"].endswith("serving again: mp against Ray")]
    assert len(compared) == 1
    assert compared[0]["met"] in (True, False)
    for text in (run.stdout, (results / "REPORT.md").read_text()):
        assert "| figure | mp | Ray | baseline (same run) | mp / Ray | goals |" in text
        assert "Timeline of the mp PP=2 group's start" in text
        assert "Timeline of the Ray PP=2 group's start" in text
        assert "Stages after worker killed in the mp group" in text
        assert "Goals:" in run.stdout
    # The mp group's timeline comes from its supervisors' event metrics: no Ray in it.
    mp_start = next(f for f in startup if f["config"].get("executor") == "mp" and f["runs"])
    phases = set(mp_start["config"]["timelines_s"][0])
    assert {"vLLM started", "group complete (supervisor)", "ready (supervisor)"} <= phases
    assert "Ray head up" not in phases
