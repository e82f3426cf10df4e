"""The committed report is generated: bench/REPORT.md is what ``python -m bench.report`` writes
from bench/results.json and the hand-written bench/analysis.md, so an edit to either shows."""

from __future__ import annotations

import json
from pathlib import Path

from records import ROOT

from bench import report


def test_the_committed_report_is_what_its_results_and_analysis_give(tmp_path: Path) -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    report.write(results, tmp_path, with_analysis=True)
    committed = (ROOT / "bench" / "REPORT.md").read_text()
    assert (tmp_path / "REPORT.md").read_text() == committed, (
        "bench/REPORT.md is stale: run python -m bench.report bench/results.json"
    )
