"""The simulator's report: plots that compare policies, and a Markdown page that shows them.

write_report(directory, results, setup) writes, for the results of one setup (one per policy):
- waits.png: the wait-time distribution of each policy (share of jobs by wait, and the tail);
- gpu-allocation.png: the share of the GPUs allocated over time, one row per policy;
- queue-shares-<policy>.png: each queue's GPUs over time against its weighted fair share;
- report.md: the setup, a summary table and the figures, readable on GitHub.

Rule: matplotlib is imported inside the functions that draw, never at import time, so nothing
but a report pays for it; figures are drawn on the Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.simulate.loop import QueueFigures, QueueShares, Result, SizeFigures

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 100
PALETTE = 128
# Waits shorter than this are drawn at it: the wait axis is logarithmic.
WAIT_FLOOR_H = 1 / 60
# Queue panels per policy figure: the queues that held the most GPU-hours.
MAX_QUEUES = 12
# Points of the plot data kept in JSON: wait quantiles, and samples of the share series.
JSON_WAIT_QUANTILES = 501
JSON_SERIES_POINTS = 200

WAITS_FILE = "waits.png"
ALLOCATION_FILE = "gpu-allocation.png"


def shares_file(policy: str) -> str:
    return f"queue-shares-{re.sub(r'[^A-Za-z0-9_.-]+', '_', policy)}.png"


def write_report(
    directory: Path,
    results: Sequence[Result],
    setup: Mapping[str, Any],
    *,
    title: str = "Simulator report",
    command: str = "",
) -> Path:
    """Write the plots and report.md for `results` (one per policy) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    _save(_waits_figure(results), directory / WAITS_FILE)
    _save(_allocation_figure(results), directory / ALLOCATION_FILE)
    queues = _queues_by_gpu_hours(results)[:MAX_QUEUES]
    for result in results:
        _save(_shares_figure(result, queues), directory / shares_file(result.policy))
    index = directory / "report.md"
    index.write_text(_markdown(results, setup, title=title, command=command, queues=queues))
    return index


# -- figures -------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> None:
    """PNG with a palette of PALETTE colors: a third of the bytes, no visible difference."""
    from PIL import Image

    drawn = io.BytesIO()
    figure.savefig(drawn, format="png", dpi=DPI)
    with Image.open(drawn) as image:
        image.convert("RGB").quantize(colors=PALETTE).save(path, optimize=True)


def _hours(seconds: Sequence[float]) -> list[float]:
    return sorted(max(s / 3600, WAIT_FLOOR_H) for s in seconds)


def _waits_figure(results: Sequence[Result]) -> Figure:
    figure = _figure(11, 4.2)
    cdf, tail = figure.subplots(1, 2)
    for i, r in enumerate(results):
        color = f"C{i % 10}"
        jobs = max(r.jobs, 1)
        finished = _hours(r.waits)
        # Share of all jobs (unfinished ones included) that finished having waited at most x:
        # the curve stops short of 1 by the share still unfinished at the end of the run.
        scale = r.finished / jobs / max(len(finished), 1)
        label = f"{r.policy}: p95 {r.wait_p95 / 3600:.2f} h, {r.censored} unfinished"
        if finished:
            cdf.step(
                [WAIT_FLOOR_H, *finished],
                [0.0, *((k + 1) * scale for k in range(len(finished)))],
                where="post",
                color=color,
                label=label,
            )
        # Share of all jobs that waited longer than x; an unfinished job counts with what it had
        # waited when the run ended (a lower bound), weighted by its share of the jobs.
        censored = _hours(r.censored_waits)
        points = [(w, r.finished / jobs / len(finished)) for w in finished] if finished else []
        points += [(w, r.censored / jobs / len(censored)) for w in censored] if censored else []
        points.sort()
        xs: list[float] = []
        ys: list[float] = []
        left = 1.0
        for w, share in points:
            left -= share
            if xs and xs[-1] == w:
                ys[-1] = left
            else:
                xs.append(w)
                ys.append(left)
        while ys and ys[-1] < 0.5 / jobs:  # log scale: the last step, to 0, is not drawn
            xs.pop()
            ys.pop()
        if xs:
            tail.step(xs, ys, where="post", color=color, label=r.policy)
    for ax in (cdf, tail):
        _wait_axis(ax)
    cdf.set_ylim(0, 1.0)
    cdf.set_xlabel("wait (under 1 min drawn at 1 min)")
    cdf.set_ylabel("share of all jobs finished within the wait")
    cdf.set_title("Wait-time distribution (finished jobs)")
    cdf.grid(True, which="major", alpha=0.3)
    if cdf.get_legend_handles_labels()[0]:
        cdf.legend(fontsize="small", loc="lower right")
    tail.set_yscale("log")
    tail.set_ylim(0.5 / max([1, *(r.jobs for r in results)]), 1.0)
    tail.axhline(0.05, color="grey", lw=0.8, ls=":")
    tail.text(WAIT_FLOOR_H, 0.05, " 5%: p95", va="bottom", fontsize="small", color="grey")
    tail.set_xlabel("wait")
    tail.set_ylabel("share of all jobs waiting longer")
    tail.set_title("Tail (unfinished jobs: their wait at the end of the run)")
    tail.grid(True, which="major", alpha=0.3)
    return figure


# Ticks of the logarithmic wait axis, in hours.
WAIT_TICKS = ((1 / 60, "1 min"), (0.1, "6 min"), (1, "1 h"), (10, "10 h"), (100, "100 h"))


def _wait_axis(ax: Axes) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xlim(left=WAIT_FLOOR_H)
    right = ax.get_xlim()[1]
    ticks = [(h, label) for h, label in WAIT_TICKS if h <= right]
    ax.set_xticks([h for h, _ in ticks], [label for _, label in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _allocation_figure(results: Sequence[Result]) -> Figure:
    rows = max(len(results), 1)
    figure = _figure(11, 0.5 + 1.0 * rows)
    axes: list[Axes] = list(figure.subplots(rows, 1, sharex=True, sharey=True, squeeze=False)[:, 0])
    for i, (ax, r) in enumerate(zip(axes, results, strict=False)):
        hours = [h for h, _ in r.gpu_allocation_series]
        share = [100 * a for _, a in r.gpu_allocation_series]
        ax.fill_between(hours, share, step="post", color=f"C{i % 10}", alpha=0.6, lw=0)
        ax.axhline(100 * r.gpu_allocation_mean, color="black", lw=0.8, ls="--")
        ax.text(
            0.005,
            0.9,
            f"{r.policy}: mean {100 * r.gpu_allocation_mean:.1f}%",
            transform=ax.transAxes,
            va="top",
            fontsize="small",
        )
        ax.set_ylim(0, 100)
        ax.set_yticks([0, 50, 100])
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xlabel("simulated hours since the first submit")
    figure.supylabel("GPUs allocated (%)", fontsize="medium")
    figure.suptitle("GPU allocation over time (dashed: time-weighted mean)")
    return figure


def _queues_by_gpu_hours(results: Sequence[Result]) -> list[str]:
    held: dict[str, float] = {}
    for r in results:
        for queue, series in r.queue_shares.allocated.items():
            held[queue] = held.get(queue, 0.0) + sum(series)
    return sorted(held, key=lambda q: (-held[q], q))


def _shares_figure(result: Result, queues: Sequence[str]) -> Figure:
    columns = min(4, max(len(queues), 1))
    rows = max(1, math.ceil(len(queues) / columns))
    figure = _figure(max(9.0, 3.0 * columns), 1.0 + 1.8 * rows)
    grid = figure.subplots(rows, columns, sharex=True, squeeze=False)
    hours = result.queue_shares.hours
    for k, ax in enumerate(grid.flat):
        if k >= len(queues):
            ax.set_visible(False)
            continue
        queue = queues[k]
        held = [float(g) for g in result.queue_shares.allocated.get(queue, [])]
        fair = result.queue_shares.fair.get(queue, [])
        n = min(len(hours), len(held), len(fair))
        ax.fill_between(hours[:n], held[:n], step="post", color="C0", alpha=0.5, lw=0)
        ax.fill_between(
            hours[:n],
            held[:n],
            fair[:n],
            where=[h < f - 1e-9 for h, f in zip(held[:n], fair[:n], strict=True)],
            step="post",
            color="C3",
            alpha=0.35,
            lw=0,
        )
        ax.step(hours[:n], fair[:n], where="post", color="black", lw=0.7)
        ax.set_title(queue, fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.set_ylim(bottom=0)
    figure.supxlabel("simulated hours since the first submit", fontsize="small")
    figure.supylabel("GPUs", fontsize="small")
    figure.suptitle(
        f"{result.policy}: GPUs held (blue) against the weighted max-min fair share of the"
        " demand (line); red: held less",
        fontsize="medium",
    )
    return figure


# -- report.md -----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _markdown(
    results: Sequence[Result],
    setup: Mapping[str, Any],
    *,
    title: str,
    command: str,
    queues: Sequence[str],
) -> str:
    lines = [f"# {title}", ""]
    if command:
        lines += ["Made by", "", "```", command, "```", ""]
    lines += ["| setup | |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in setup.items()]
    lines += [
        "",
        "| policy | alloc % | mean wait h | p95 wait h | p95 by GPU h | unfinished"
        " | fair p5 | evictions | wasted GPU-h |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.policy} | {100 * r.gpu_allocation_mean:.1f} | {r.wait_mean / 3600:.2f}"
            f" | {r.wait_p95 / 3600:.2f} | {r.wait_p95_by_gpu / 3600:.2f} | {r.censored}"
            f" | {r.fair_ratio_p5:.3f} | {r.evictions} | {r.wasted_gpu_hours:.0f} |"
        )
    lines += [
        "",
        "## Wait time",
        "",
        f"![wait-time distribution per policy]({WAITS_FILE})",
        "",
        "Left: the share of all jobs that finished within a given wait (wait = completion -"
        " duration - submit); a curve ends below 1 by the share of jobs still unfinished when"
        " the run ended. Right: the share that waited longer (log scale), counting an"
        " unfinished job with what it had waited by the end of the run; where a curve crosses"
        " 5% is its p95.",
        "",
        "## GPU allocation over time",
        "",
        f"![GPU allocation over time per policy]({ALLOCATION_FILE})",
        "",
        "## Each queue's GPUs against its fair share",
        "",
        "Sampled every 15 simulated minutes: the GPUs of each queue's running jobs, and its"
        " weighted max-min fair share of the cluster's GPUs given what every queue holds and"
        " waits for at that moment (the share `fair p5` above is measured against)."
        f" Queues by GPU-hours held: {', '.join(queues)}.",
        "",
    ]
    for r in results:
        figure = shares_file(r.policy)
        lines += [f"### {r.policy}", "", f"![{r.policy}: each queue's share]({figure})", ""]
    return "\n".join(lines)


# -- JSON ----------------------------------------------------------------------------------


def _thin(values: Sequence[Any], every: int) -> list[Any]:
    return list(values[::every])


def plot_data(result: Result) -> dict[str, Any]:
    """The data behind the plots, small enough for JSON.

    Waits become quantiles (JSON_WAIT_QUANTILES of them, whole seconds); the share series keeps
    every k-th sample so that at most JSON_SERIES_POINTS remain.
    """

    def quantiles(values: Sequence[float]) -> list[float]:
        if not values:
            return []
        ordered = sorted(values)
        last, points = len(ordered) - 1, JSON_WAIT_QUANTILES - 1
        # The nearest job's wait at each of `points` even steps (percentile() would re-sort).
        return [round(ordered[round(last * i / points)]) for i in range(points + 1)]

    shares = result.queue_shares
    every = max(1, math.ceil(len(shares.hours) / JSON_SERIES_POINTS))
    return {
        "wait_quantiles_s": quantiles(result.waits),
        "censored_wait_quantiles_s": quantiles(result.censored_waits),
        "queue_shares": {
            "hours": [round(h, 2) for h in _thin(shares.hours, every)],
            "allocated": {q: _thin(s, every) for q, s in shares.allocated.items()},
            "fair": {q: [round(f, 1) for f in _thin(s, every)] for q, s in shares.fair.items()},
        },
    }


def _number(value: Any) -> Any:
    return math.nan if value is None else value


def result_from_json(data: Mapping[str, Any]) -> Result:
    """A Result back from `kohort simulate --json` output, its plot data as `plot_data` made it.

    Figures that an older JSON lacks are NaN; without plot data the waits and shares are empty.
    """
    names = [f.name for f in dataclasses.fields(Result)]
    values: dict[str, Any] = {name: _number(data.get(name)) for name in names}
    values["gpu_allocation_series"] = [
        (float(h), float(a)) for h, a in data.get("gpu_allocation_series", [])
    ]
    values["queues"] = {
        q: QueueFigures(**{k: _number(v) for k, v in f.items()})
        for q, f in data.get("queues", {}).items()
    }
    values["by_size"] = {
        s: SizeFigures(**{k: _number(v) for k, v in f.items()})
        for s, f in data.get("by_size", {}).items()
    }
    plot = data.get("plot_data") or {}
    shares = plot.get("queue_shares") or {}
    values["waits"] = [float(w) for w in plot.get("wait_quantiles_s", [])]
    values["censored_waits"] = [float(w) for w in plot.get("censored_wait_quantiles_s", [])]
    values["queue_shares"] = QueueShares(
        [float(h) for h in shares.get("hours", [])],
        {q: list(s) for q, s in shares.get("allocated", {}).items()},
        {q: [float(f) for f in s] for q, s in shares.get("fair", {}).items()},
    )
    return Result(**values)
