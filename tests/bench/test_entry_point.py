"""The benchmark entry point runs on a minimal configuration and writes well-formed results.

No figure is judged here (figures live in bench/, as ratios measured on a quiet machine): this only
proves that `python -m bench --quick` measures every benchmark it can on this machine, records the
others as skipped with their reason, and writes results.json, REPORT.md and the plots.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = {"serving", "startup", "recovery", "throughput", "cache"}
RECORD_KEYS = {
    "benchmark",
    "name",
    "unit",
    "value",
    "baseline",
    "baseline_name",
    "ratio",
    "config",
    "load",
    "goal",
    "met",
    "skipped",
}

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
    command = [sys.executable, "-m", "bench", "--quick", "--results", str(results)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    print(run.stdout[-6000:])
    print(run.stderr[-6000:], file=sys.stderr)
    return run, results


def test_quick_run_exits_zero_and_prints_the_table(quick_run) -> None:
    run, _ = quick_run
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ratio (range)" in run.stdout


def test_results_json_has_one_well_formed_record_per_figure(quick_run) -> None:
    _, results = quick_run
    data = json.loads((results / "results.json").read_text())
    assert data["quick"] is True
    assert data["machine"]["cores"] >= 1
    figures = data["figures"]
    assert {"serving", "startup", "cache"} <= {figure["benchmark"] for figure in figures}
    for figure in figures:
        assert figure.keys() >= RECORD_KEYS, figure
        assert figure["benchmark"] in BENCHMARKS
        assert not figure["skipped"].startswith("FAILED"), figure["skipped"]
        if figure["skipped"]:
            continue  # a skip names its reason; nothing was measured
        assert math.isfinite(figure["value"]), figure
        assert math.isfinite(figure["baseline"]), figure
        # A cost (the supervisor's CPU) can measure 0 at the clock's 10 ms resolution in a quick
        # run; a rate cannot: something was served.
        assert figure["ratio"] >= 0, figure
        if figure["unit"].endswith("/s"):
            assert figure["ratio"] > 0, figure
        assert min(figure["load"]["before"], figure["load"]["after"]) >= 0
        assert figure["config"], f"{figure['name']} carries no configuration"


def test_group_benchmark_measures_mp_ray_and_plain_side_by_side(quick_run) -> None:
    run, results = quick_run
    figures = json.loads((results / "results.json").read_text())["figures"]
    startup = [f for f in figures if f["benchmark"] == "startup"]
    if all(figure["skipped"] for figure in startup):
        pytest.skip(f"the group benchmark was skipped: {startup[0]['skipped']}")
    rows: dict[str, set[str]] = {}
    for figure in figures:
        config = figure["config"]
        if "row" in config and config["executor"] in ("mp", "ray"):
            rows.setdefault(config["row"], set()).add(config["executor"])
            assert figure["baseline"] > 0, figure  # the plain server of the same run
    assert rows == {
        "start-up to Ready": {"mp", "ray"},
        "recovery after a killed worker": {"mp", "ray"},
        "serving throughput": {"mp", "ray"},
    }
    compared = [f for f in figures if f["name"].endswith("serving again: mp against Ray")]
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


def test_skips_say_why(quick_run) -> None:
    _, results = quick_run
    for figure in json.loads((results / "results.json").read_text())["figures"]:
        if figure["value"] is None:
            assert figure["skipped"], f"{figure['name']} has no value and no reason"


def test_report_links_plots_that_exist(quick_run) -> None:
    _, results = quick_run
    report = (results / "REPORT.md").read_text()
    assert report.startswith("# Benchmarks")
    for line in report.splitlines():
        if line.startswith("![") and line.endswith(".png)"):
            png = results / line.split("(")[-1].rstrip(")")
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"


def test_unknown_benchmark_is_refused_naming_the_choices() -> None:
    command = [sys.executable, "-m", "bench", "--only", "serve"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert (
        "unknown benchmark(s) serve: choose from cache-warm, cache-fanout, serving, group"
        in run.stderr
    )


def test_unknown_executor_is_refused_naming_the_choices() -> None:
    command = [sys.executable, "-m", "bench", "--only", "group", "--executors", "ray,rpc"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "unknown executor(s) rpc: choose from ray, mp" in run.stderr
