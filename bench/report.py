"""The run's table (stdout), ``REPORT.md`` with its PNG plots, and the README's summary table.

Everything here reads the results JSON only, so a report can be rebuilt from a committed
``results.json`` without measuring again: ``python -m bench.report bench/results.json``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import models

Record = dict[str, Any]
ANALYSIS = Path(__file__).with_name("analysis.md")  # hand-written: why each figure is what it is
README_START = "<!-- bench-table:start (written by python -m bench; do not edit) -->"
README_END = "<!-- bench-table:end -->"
EXECUTORS = (("mp", "mp"), ("ray", "Ray"))  # group.executor, and its name in the tables
FIRST_SECOND = ("first", "second")  # the deployments of the second-deployment figure
SECTIONS = (
    ("serving", "Serving overhead", "serving.png"),
    ("startup", "Group start-up", "startup.png"),
    ("recovery", "Recovery", "recovery.png"),
    ("throughput", "PP=2 group throughput", "throughput.png"),
    ("cache", "Model cache", "cache.png"),
)


def table(results: Record, figures: Sequence[Record] | None = None) -> str:
    """A plain-text table of every figure (what `python -m bench` prints)."""
    rows = [("figure", "value", "baseline", "ratio (range)", "goal", "load")]
    for figure in figures if figures is not None else results["figures"]:
        rows.append(_row(figure))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(figures: Sequence[Record]) -> str:
    rows = [_row(figure) for figure in figures]
    head = "| figure | value | baseline | ratio (range) | goal | load |\n|---|---|---|---|---|---|"
    return "\n".join([head, *("| " + " | ".join(row) + " |" for row in rows)])


def _row(figure: Record) -> tuple[str, str, str, str, str, str]:
    name = f"{figure['benchmark']}{_model_label(figure)}: {figure['name']}"
    if figure["skipped"]:
        return name, "-", "-", "-", f"skipped: {figure['skipped']}", _load(figure)
    value = _amount(figure["value"], figure["unit"])
    baseline = f"{_amount(figure['baseline'], figure['unit'])} ({figure['baseline_name']})"
    ratio = "-" if figure["ratio"] is None else f"{figure['ratio']:.2f}x"
    if figure.get("spread"):
        low, high = figure["spread"]
        ratio += f" ({low:.2f}-{high:.2f})"
    return name, value, baseline, ratio, _goal(figure), _load(figure)


def _amount(number: float | None, unit: str) -> str:
    if number is None:
        return "-"
    digits = 3 if abs(number) < 0.1 else 2 if abs(number) < 10 else 1 if abs(number) < 1000 else 0
    return f"{number:.{digits}f} {unit}".strip()


def _goal(figure: Record) -> str:
    goal = figure.get("goal")
    if not goal:
        return ""
    verdict = {True: "met", False: "MISSED", None: "-"}[figure["met"]]
    return f"{verdict}: {goal['text']}"


def _load(figure: Record) -> str:
    load = figure["load"]
    return f"{load['before']:.1f}->{load['after']:.1f}"


def goals_text(figures: Sequence[Record]) -> str:
    """Every goal of the run, met or missed, with what it bounds (ratio, difference or value)
    against its limit: the last thing `python -m bench` prints."""
    rows = [("goal", "verdict", "this run", "limit", "figure")]
    for figure in figures:
        goal = figure.get("goal")
        if not goal:
            continue
        verdict = {True: "met", False: "MISSED", None: "not measured"}[figure["met"]]
        rows.append(
            (
                goal["text"],
                verdict,
                _measured(figure),
                _limit(goal, figure["unit"]),
                figure["name"] + _model_label(figure),
            )
        )
    if len(rows) == 1:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(["Goals:", *lines])


def _measured(figure: Record) -> str:
    """What the figure's goal bounds, as measured: ``0.55x``, ``+2.1 s``, ``1.2 s``."""
    on = figure["goal"]["on"]
    if figure["skipped"] or figure[on] is None:
        return "-"
    if on == "ratio":
        return f"{figure['ratio']:.2f}x"
    if on == "difference":
        return f"{figure['difference']:+.1f} {figure['unit']}".strip()
    return _amount(figure["value"], figure["unit"])


def _limit(goal: Record, unit: str) -> str:
    if goal["on"] == "ratio":
        return f"{goal['op']} {goal['limit']:g}x"
    sign = "+" if goal["on"] == "difference" else ""
    return f"{goal['op']} {sign}{goal['limit']:g} {unit}".strip()


# The executors side by side ---------------------------------------------------------------------


def side_by_side(figures: Sequence[Record]) -> list[str]:
    """One row per figure each executor's group has (``config["row"]``): mp, Ray, the baseline
    beside them (the plain vLLM server, or each group's own cold start), mp / Ray, and the goals
    on that row."""
    rows: dict[str, dict[str, Record]] = {}
    for figure in figures:
        config = figure.get("config") or {}
        if not figure["skipped"] and "row" in config:
            row = config["row"] + _model_label(figure)
            rows.setdefault(row, {})[config["executor"]] = figure
    if not rows:
        return []
    lines = [
        "| figure | mp | Ray | baseline (same run) | mp / Ray | goals |",
        "|---|---|---|---|---|---|",
    ]
    for row, by in rows.items():
        measured = [by[key] for key, _ in EXECUTORS if key in by]
        if not measured:
            continue
        unit = measured[0]["unit"]
        cells = [_amount(by[key]["value"], unit) if key in by else "-" for key, _ in EXECUTORS]
        ratio = "-"
        if "mp" in by and "ray" in by and by["ray"]["value"]:
            ratio = f"{by['mp']['value'] / by['ray']['value']:.2f}x"
        lines.append(
            f"| {row} | {' | '.join(cells)} | {_baselines(by, unit)} | {ratio} | {_goals(by)} |"
        )
    return lines


def _baselines(by: dict[str, Record], unit: str) -> str:
    """One baseline (the plain server's) or each executor's own (its group's cold start)."""
    measured = {label: by[key] for key, label in EXECUTORS if key in by}
    if len({f["baseline"] for f in measured.values()}) == 1:
        first = next(iter(measured.values()))
        return f"{_amount(first['baseline'], unit)} ({first['baseline_name']})"
    return "; ".join(
        f"{label}: {_amount(f['baseline'], unit)} ({f['baseline_name']})"
        for label, f in measured.items()
    )


def _goals(by: dict[str, Record]) -> str:
    """Each goal of the row once, with each executor's verdict: ``text: mp met, Ray MISSED``."""
    verdicts: dict[str, list[str]] = {}
    labels = {**dict(EXECUTORS), "mp / Ray": "mp / Ray"}
    for key, figure in sorted(by.items(), key=lambda kv: list(labels).index(kv[0])):
        if figure.get("goal"):
            verdict = {True: "met", False: "MISSED", None: "-"}[figure["met"]]
            verdicts.setdefault(figure["goal"]["text"], []).append(
                f"{labels.get(key, key)} {verdict}"
            )
    return "; ".join(f"{text}: {', '.join(each)}" for text, each in verdicts.items())


def executors_text(figures: Sequence[Record]) -> str:
    """What `python -m bench` prints after its table: the side-by-side table and each executor's
    phase timeline (empty when the group benchmark did not run)."""
    parts = side_by_side(figures)
    for benchmark in ("startup", "recovery"):
        measured = [f for f in figures if f["benchmark"] == benchmark and not f["skipped"]]
        for key, section in _by_model(measured):
            parts += ["", *_model_heading(key, "###"), *_details(benchmark, section)]
    return "\n".join(parts)


def _model_label(figure: Record) -> str:
    """`` (SmolLM2-135M)``: the model a serving or group figure served; "" for the cache's."""
    key = models.model_of(figure)
    return f" ({models.MODELS[key].label})" if key else ""


def _by_model(figures: Sequence[Record]) -> list[tuple[str, list[Record]]]:
    """The figures split by the model they served (``models.model_of``), in the order of
    ``models.MODELS``; one part with key "" for figures that served none."""
    keys = ["", *models.MODELS]
    found = sorted({models.model_of(f) for f in figures}, key=keys.index)
    return [(key, [f for f in figures if models.model_of(f) == key]) for key in found]


def _model_heading(key: str, level: str) -> list[str]:
    if not key:
        return []
    model = models.MODELS[key]
    return [f"{level} On the {model.label}: {model.described}", ""]


# REPORT.md ---------------------------------------------------------------------------------------


def write(results: Record, directory: Path, *, with_analysis: bool | None = None) -> None:
    """REPORT.md and the plots of the sections that have figures; analysis.md at its end when
    asked, by default only in bench/ itself (a run's report elsewhere is not what it explains)."""
    figures = results["figures"]
    parts = [_header(results)]
    goals = [f for f in figures if f.get("goal")]
    if goals:
        parts += ["## Goals", "", markdown_table(goals), ""]
    side = side_by_side(figures)
    if side:
        parts += ["## mp, Ray and plain vLLM side by side", "", *side, ""]
    for benchmark, title, png in SECTIONS:
        parts_of = _by_model([f for f in figures if f["benchmark"] == benchmark])
        if parts_of:
            parts += [f"## {title}", ""]
        for key, section in parts_of:
            parts += _model_heading(key, "###")
            plot = png.replace(".png", f"-{key}.png") if key else png
            if _plot(benchmark, section, directory / plot):
                parts += [f"![{title}]({plot})", ""]
            parts += [markdown_table(section), ""]
            parts += _details(benchmark, section)
    if with_analysis is None:
        with_analysis = directory.resolve() == ANALYSIS.parent.resolve()
    if with_analysis and ANALYSIS.exists():
        parts += [ANALYSIS.read_text().strip(), ""]
    (directory / "REPORT.md").write_text("\n".join(parts))


def _header(results: Record) -> str:
    machine = results["machine"]
    versions = ", ".join(
        f"{k} {machine[k]}" for k in ("vllm", "ray", "huggingface_hub") if k in machine
    )
    return (
        "# Benchmarks\n\n"
        f"`{results['command']}` on {results['generated']}, {results['seconds']:.0f} s: "
        f"{machine['cores']} cores, {machine['memory_gib']} GiB, Python {machine['python']}, "
        f"{versions}. Every figure is measured against a baseline from the same run; the ratio is "
        "value / baseline (for paired runs, the median of the pairs' ratios, with their range). "
        "`load` is the 1-minute load average before -> after the measurement (the machine, shared "
        "with other developers' tests, has 2 cores). Raw numbers, per-run values and the exact "
        "configuration of each figure are in [`results.json`](results.json).\n"
    )


def _details(benchmark: str, figures: Sequence[Record]) -> list[str]:
    """The start-up timeline of each executor's group, the phases of each pair of deployments,
    and the stages after each fault, as tables."""
    lines: list[str] = []
    for key, label in _executors(figures):
        config = _executor_config(figures, key)
        if benchmark == "startup" and config.get("timelines_s"):
            lines += _timeline_table(label, config)
    titled: set[str] = set()
    for figure in figures:
        config = figure.get("config") or {}
        label = dict(EXECUTORS).get(config.get("executor", ""), "")
        if benchmark == "startup" and config.get("deployments_s"):
            lines += _deployments_table(label, config)
        if benchmark == "recovery" and config.get("stages_s"):
            title = _stages_title(label, config)
            if title not in titled:  # older results repeat the stages on the detection figure
                titled.add(title)
                lines += _stages_table(title, config)
    return lines


def _executors(figures: Sequence[Record]) -> list[tuple[str, str]]:
    """(executor, its name) of the figures' groups: mp, Ray; ``("", "")`` for a results.json made
    before the group benchmark had executors (its figures name none: they were Ray's)."""
    present = {(f.get("config") or {}).get("executor", "") for f in figures if f.get("config")}
    return [(key, label) for key, label in (*EXECUTORS, ("", "")) if key in present]


def _executor_config(figures: Sequence[Record], executor: str) -> Record:
    """The configuration of that executor's cold starts (their timelines) or of its killed worker
    (its stages): the first figure's that has either."""
    for figure in figures:
        config = figure.get("config") or {}
        ours = config.get("executor", "") == executor
        if ours and config.get("scenario", "worker") == "worker" and _has_phases(config):
            return config
    return {}


def _timeline_table(label: str, config: Record) -> list[str]:
    events = _median_timeline(config["timelines_s"])
    plain = statistics.median(config["plain_s"])
    group = f"the {label} PP=2 group's" if label else "a PP=2 group"
    lines = [
        f"Timeline of {group} start (median over starts, seconds after the first container "
        f"started; one plain vLLM server lists the model after {plain:.1f} s):",
        "",
        "| phase | s |",
        "|---|---|",
    ]
    lines += [f"| {name} | {at:.1f} |" for name, at in events]
    return [*lines, ""]


def _has_phases(config: Record) -> bool:
    return bool(config.get("timelines_s") or config.get("stages_s"))


def _stages_title(label: str, config: Record) -> str:
    if config.get("stages_title"):
        return str(config["stages_title"])
    group = f"the {label} group's" if label else "the"
    return f"Stages after {group} worker container was killed (seconds)"


def _stages_table(title: str, config: Record) -> list[str]:
    lines = [f"{title}:", "", "| stage | s |", "|---|---|"]
    lines += [f"| {name} | {at:.1f} |" for name, at in _median_timeline([config["stages_s"]])]
    how = config.get("head_previous_container_ended")
    if how:
        lines += ["", f"The head's previous container ended with reason `{how}`."]
    return [*lines, ""]


def _deployments_table(label: str, config: Record) -> list[str]:
    """The two deployments' phases side by side (seconds after each one's first container)."""
    first, second = (dict(_median_timeline([config["deployments_s"][k]])) for k in FIRST_SECOND)
    lines = [
        f"Phases of the {label} group's first and second deployment on one shared compile cache "
        "(seconds after each one's first container started):",
        "",
        "| phase | first | second |",
        "|---|---|---|",
    ]
    # A list, not a set of the names: a set's order changes between runs (string hashing), and
    # phases at the same time would swap rows in every rebuilt report.
    names = [*first, *(name for name in second if name not in first)]
    for name in sorted(names, key=lambda n: first[n] if n in first else second[n]):
        cells = [f"{d[name]:.1f}" if name in d else "-" for d in (first, second)]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return [*lines, ""]


def _median_timeline(timelines: Sequence[dict[str, float]]) -> list[tuple[str, float]]:
    """Each event's median time over the starts, under names without addresses (they differ)."""
    merged: dict[str, list[float]] = {}
    for timeline in timelines:
        for name, at in timeline.items():
            merged.setdefault(
                re.sub(r"\d+\.\d+\.\d+\.\d+ ?", "", name).replace("  ", " ").strip(), []
            ).append(at)
    medians = {name: statistics.median(times) for name, times in merged.items()}
    return sorted(medians.items(), key=lambda kv: kv[1])


# Plots -------------------------------------------------------------------------------------------


def _plot(benchmark: str, figures: Sequence[Record], path: Path) -> bool:
    measured = [f for f in figures if not f["skipped"]]
    if not measured:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {
        "serving": _plot_serving,
        "startup": _plot_startup,
        "recovery": _plot_recovery,
        "throughput": _plot_throughput,
        "cache": _plot_cache,
    }[benchmark](plt, measured)
    if drawn is None:
        return False
    drawn.tight_layout()
    drawn.savefig(path, dpi=110)
    plt.close(drawn)
    return True


def _plot_serving(plt: Any, figures: Sequence[Record]) -> Any:
    names = [f["name"].rsplit(": ", 1)[0] for f in figures if f["unit"] not in ("cores", "x plain")]
    scenarios = list(dict.fromkeys(names))  # in the order measured
    metrics = ("throughput", "p50 latency", "p99 latency", "CPU per request")
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(scenarios) * len(metrics) / 2 + 1.5))
    height = 0.2
    for offset, metric in enumerate(metrics):
        ratios: list[float] = []
        errors: list[list[float]] = [[], []]
        for scenario in scenarios:
            record = next(f for f in figures if f["name"] == f"{scenario}: {metric}")
            ratio = record["ratio"]
            low, high = record.get("spread") or (ratio, ratio)
            ratios.append(ratio)
            errors[0].append(ratio - low)
            errors[1].append(high - ratio)
        positions = [i + (offset - 1.5) * height for i in range(len(scenarios))]
        axis.barh(positions, ratios, height, xerr=errors, label=f"{metric} ours / plain", capsize=2)
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.axvline(0.98, color="red", linestyle="--", linewidth=0.8, label="throughput goal 0.98")
    axis.set_yticks(range(len(scenarios)), scenarios)
    axis.invert_yaxis()
    axis.set_xlabel("ratio ours / plain vLLM (median of paired runs, bars: range)")
    axis.set_title("Serving overhead: our runtime's endpoint vs plain vLLM")
    axis.legend(fontsize=8, loc="lower right")
    return figure


def _plot_startup(plt: Any, figures: Sequence[Record]) -> Any:
    """One panel per executor: its median timeline, plain vLLM's start and the executor's goal."""
    panels = [
        (label, config, _goal_limit(figures, key))
        for key, label in _executors(figures)
        if (config := _executor_config(figures, key)).get("timelines_s")
    ]
    if not panels:
        return None
    heights = [len(_median_timeline(config["timelines_s"])) for _, config, _ in panels]
    figure, axes = plt.subplots(
        len(panels),
        1,
        figsize=(9, 0.35 * sum(heights) + 1.5 * len(panels)),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for axis, (label, config, limit) in zip(axes[:, 0], panels, strict=True):
        _startup_panel(axis, label, config, limit)
    axes[-1, 0].set_xlabel("seconds after the first container started (median over starts)")
    return figure


def _startup_panel(axis: Any, label: str, config: Record, limit: float | None) -> None:
    events = _median_timeline(config["timelines_s"])
    plain = statistics.median(config["plain_s"])
    axis.scatter([at for _, at in events], range(len(events)), zorder=3)
    for index, (_name, at) in enumerate(events):
        axis.hlines(index, 0, at, color="lightgray", zorder=1)
    axis.axvline(
        plain, color="green", linestyle="--", label=f"one plain vLLM server ready ({plain:.1f} s)"
    )
    if limit is not None:
        axis.axvline(plain + limit, color="red", linestyle=":", label=f"goal: plain + {limit:g} s")
    axis.set_yticks(range(len(events)), [name for name, _ in events], fontsize=8)
    axis.invert_yaxis()
    times = dict(events)
    if "vLLM started" in times and "engine answers (bench poll)" in times:
        axis.axvspan(
            times["vLLM started"],
            times["engine answers (bench poll)"],
            color="tab:blue",
            alpha=0.08,
            label=f"vLLM starting ({label or 'its'} executor, two pipeline stages)",
        )
    axis.set_title(f"PP=2 {label} group start-up on the local cluster".replace("  ", " "))
    axis.legend(fontsize=7, loc="upper center")


def _goal_limit(figures: Sequence[Record], executor: str) -> float | None:
    """The start-up goal's bound (seconds after plain vLLM) of that executor's group."""
    for figure in figures:
        config = figure.get("config") or {}
        goal = figure.get("goal") or {}
        if config.get("executor", "") == executor and goal.get("on") == "difference":
            return float(goal["limit"])
    return None


def _plot_recovery(plt: Any, figures: Sequence[Record]) -> Any:
    """Each stage's seconds after the kill, a bar per executor, and plain vLLM's cold start."""
    groups = [
        (label, config)
        for key, label in _executors(figures)
        if (config := _executor_config(figures, key)).get("stages_s")
    ]
    if not groups:
        return None
    stages = list(dict.fromkeys(name for _, c in groups for name in c["stages_s"]))
    stages.sort(key=lambda name: max(c["stages_s"].get(name, 0.0) for _, c in groups))
    figure, axis = plt.subplots(figsize=(9, 0.4 * len(stages) * len(groups) + 1.5))
    height = 0.8 / len(groups)
    for offset, (label, config) in enumerate(groups):
        positions = [i + (offset - (len(groups) - 1) / 2) * height for i in range(len(stages))]
        seconds = [config["stages_s"].get(name, 0.0) for name in stages]
        axis.barh(positions, seconds, height, label=label or "group")
    plain = statistics.median(groups[0][1]["plain_s"]) if groups[0][1].get("plain_s") else None
    if plain is not None:
        axis.axvline(
            plain, color="green", linestyle="--", label=f"plain vLLM cold start ({plain:.1f} s)"
        )
    axis.set_yticks(range(len(stages)), stages)
    axis.invert_yaxis()
    axis.set_xlabel("seconds after the worker's container was killed")
    axis.set_title("Recovery of a PP=2 group from a killed worker")
    axis.legend(fontsize=8, loc="upper right")
    return figure


def _plot_throughput(plt: Any, figures: Sequence[Record]) -> Any:
    """Requests per second of each executor's PP=2 group and of the plain server, same load."""
    measured = [f for f in figures if f["unit"] == "req/s"]
    if not measured:
        return None
    labels = [f"PP=2 {dict(EXECUTORS)[f['config']['executor']]}" for f in measured]
    values = [f["value"] for f in measured]
    labels.append("plain vLLM")
    values.append(measured[0]["baseline"])
    figure, axis = plt.subplots(figsize=(6, 3.2))
    axis.bar(labels, values, color=["tab:blue"] * len(measured) + ["tab:green"])
    for index, value in enumerate(values):
        axis.text(index, value, f"{value:.1f}", ha="center", va="bottom", fontsize=8)
    axis.set_ylabel("req/s")
    axis.set_title(f"Throughput: {measured[0]['config'].get('load', '')}", fontsize=10)
    return figure


def _plot_cache(plt: Any, figures: Sequence[Record]) -> Any:
    panels = [
        ("warm: one large blob", [f for f in figures if f["unit"] == "MB/s"]),
        ("warm: CPU seconds per GB sent", [f for f in figures if f["unit"] == "CPU s/GB"]),
        ("cold fan-out: time to all 4 nodes", [f for f in figures if f["unit"] == "s"]),
        ("cold fan-out: upstream bytes", [f for f in figures if f["unit"] == "x model"]),
    ]
    panels = [(title, panel) for title, panel in panels if panel]
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for axis, (title, panel) in zip(axes[0], panels, strict=True):
        positions = list(range(len(panel)))
        labels = [f["name"].split(": ")[0].split(", ")[-1] for f in panel]
        axis.bar([p - 0.2 for p in positions], [f["value"] for f in panel], 0.4, label="cache")
        baseline = panel[0]["baseline_name"].split(",")[0]
        axis.bar([p + 0.2 for p in positions], [f["baseline"] for f in panel], 0.4, label=baseline)
        labels = [f"{label}\n{f['ratio']:.2f}x" for label, f in zip(labels, panel, strict=True)]
        axis.set_xticks(positions, labels, fontsize=8)
        axis.set_xlim(-0.7, len(panel) - 0.3)
        axis.set_ylim(0, 1.3 * max(max(f["value"], f["baseline"]) for f in panel))
        axis.set_ylabel(panel[0]["unit"])
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=7, loc="upper left")
    return figure


# README ------------------------------------------------------------------------------------------


def summary_table(figures: Sequence[Record]) -> str:
    """The headline figures: every figure with a goal (serving throughput pooled per route), the
    join detection, the start-up's share that is ours, and recovery."""
    lines = ["| figure | ours | baseline | ratio (range) | goal |", "|---|---|---|---|---|"]
    for figure in figures:
        if figure["skipped"]:
            lines.append(f"| {_row(figure)[0]} | - | - | - | {_row(figure)[4]} |")
            continue
        wanted = ("noticed", "our share", "group serving again", "until every node")
        if figure.get("goal") or any(word in figure["name"] for word in wanted):
            row = _row(figure)
            lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]} |")
    return "\n".join(lines)


def update_readme(results: Record, readme: Path) -> None:
    """Replace the README's benchmark tables (between their markers) with this run's goal figures
    and the executors side by side."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return
    parts = [README_START, "", summary_table(results["figures"]), ""]
    side = side_by_side(results["figures"])
    if side:  # the executors' headline figures, mp and Ray beside plain vLLM
        parts += ["PP=2 groups by executor, beside one plain vLLM server:", "", *side, ""]
    block = "\n".join([*parts, README_END])
    pattern = re.escape(README_START) + ".*?" + re.escape(README_END)
    readme.write_text(re.sub(pattern, lambda _match: block, text, flags=re.DOTALL))


def main(argv: list[str] | None = None) -> int:
    """Rebuild REPORT.md and the plots (and for bench/, the README table) from a results.json."""
    path = Path((argv or sys.argv[1:] or ["bench/results.json"])[0])
    results = json.loads(path.read_text())
    write(results, path.parent)
    if path.parent.resolve() == ANALYSIS.parent.resolve():
        update_readme(results, ANALYSIS.parent.parent / "README.md")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
