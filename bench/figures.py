"""One record per figure: the value, the baseline measured in the same run, their ratio, the goal.

A figure's goal is a bound on its ratio (``value / baseline``), on its difference
(``value - baseline``) or on its value itself; ``met`` says whether this run kept it. Every figure
carries the exact configuration that produced it and the machine's load average around it (the
machine is shared: a figure measured under load says so).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Goal:
    on: str  # "ratio", "difference" or "value"
    op: str  # ">=", "<=" or "<"
    limit: float
    text: str  # the goal, in words

    def met(self, figure: Figure) -> bool | None:
        measured = {"ratio": figure.ratio, "difference": figure.difference, "value": figure.value}[
            self.on
        ]
        if measured is None:
            return None
        if self.op == "<":
            return measured < self.limit
        return measured >= self.limit if self.op == ">=" else measured <= self.limit


@dataclass
class Load:
    """The 1-minute load average before and after a measurement (cores busy, of 2)."""

    before: float
    after: float = 0.0


@contextmanager
def load_average() -> Iterator[Load]:
    load = Load(before=os.getloadavg()[0])
    try:
        yield load
    finally:
        load.after = os.getloadavg()[0]


@dataclass
class Figure:
    benchmark: str  # serving, startup, recovery, throughput, cache
    name: str
    unit: str
    value: float | None
    baseline: float | None
    baseline_name: str  # what the baseline is, e.g. "plain vLLM"
    config: dict[str, Any]
    load: Load
    goal: Goal | None = None
    paired_ratio: float | None = None  # the median of per-pair ratios, where runs were paired
    spread: tuple[float, float] | None = None  # min and max of the per-pair ratios
    note: str = ""
    skipped: str = ""  # why the figure could not be measured here; value and baseline are None
    runs: list[dict[str, float]] = field(default_factory=list)  # raw per-run numbers
    source: str = ""  # the benchmark (``python -m bench --only`` name) that measured it
    model: str = ""  # the model it served (``bench.models``); "" for the cache's figures
    measured_at: str = field(default_factory=lambda: timestamp())

    @property
    def ratio(self) -> float | None:
        """value / baseline; for paired runs, the median of the pairs' ratios (robust to drift)."""
        if self.paired_ratio is not None:
            return self.paired_ratio
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def difference(self) -> float | None:
        if self.value is None or self.baseline is None:
            return None
        return self.value - self.baseline

    @property
    def met(self) -> bool | None:
        return self.goal.met(self) if self.goal else None

    def record(self) -> dict[str, Any]:
        record = asdict(self)
        record.update(ratio=self.ratio, difference=self.difference, met=self.met)
        return record


def skipped(benchmark: str, name: str, unit: str, baseline_name: str, reason: str) -> Figure:
    """A figure that could not be measured on this machine, and why."""
    return Figure(
        benchmark,
        name,
        unit,
        None,
        None,
        baseline_name,
        {},
        Load(os.getloadavg()[0]),
        skipped=reason,
    )


def timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
