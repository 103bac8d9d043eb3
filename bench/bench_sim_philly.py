"""Scheduling quality on the Philly trace: every policy, 4x and 8x compressed, both node lists.

    .venv/bin/python bench/bench_sim_philly.py [--jobs 2] [--out .kohort/bench] [--only-report]
        [--report DIR] [--modes single,flavors] [-- ARGS OF kohort simulate philly]

Runs `kohort simulate philly --json` once per (compression, node list, policy) in parallel
subprocesses, keeps each JSON under --out, then prints one table per setting and the headline
ratios of issues 4 and 7:
- partial placements and the GPU-hours they held idle (kube-default, quota-drf; kohort must be 0);
- p95 wait of kohort against quota-drf and gang-fifo (and gang-fifo without its enqueue stage);
- wasted GPU-hours of kohort against the naive reclaim baseline (target <= 1/10), and p95 wait;
then the targets of issues 18 and 40, met or missed, for every setting in one table.
A full run takes tens of minutes on two cores; --only-report re-prints from saved JSON.
--modes: `single` (default) is one pool of GPUs; `flavors` runs `kohort simulate philly
--flavors` (GPU types as flavors, its JSON named ...-flavors-<policy>.json); with both, a table
per setting sets each policy's figures of the two side by side.
--report DIR also writes the plots of `kohort simulate --report` for each setting into
DIR/philly-<compression>x-<nodes>/ (drawn from the JSON's compact plot data).
--half-lives H1,H2,... (seconds) runs only the `kohort` policy once per usage half-life
(`--usage-half-life`, its JSON named ...-kohort-h<H>.json) and prints its figures per
half-life and setting, each beside the half-life 0 row: how the default was chosen.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.simulate.main import COLUMN_NOTE
from controller.simulate.policies import POLICIES

SETTINGS = [(c, n) for c in (4.0, 8.0) for n in ("homogeneous", "mixed")]
MODES = ("single", "flavors")
# One simulation: (compression, nodes, policy, its extra flags, mode, saved as).
Run = tuple[float, str, str, list[str], str, str]


def out_file(out: Path, compression: float, nodes: str, policy: str, mode: str = "single") -> Path:
    flavors = "-flavors" if mode == "flavors" else ""
    return out / f"philly-{compression:g}x-{nodes}{flavors}-{policy}.json"


def run_one(
    out: Path,
    compression: float,
    nodes: str,
    policy: str,
    extra: list[str],
    mode: str = "single",
    saved_as: str | None = None,
) -> str:
    """One simulation, its JSON saved under the policy's name (or `saved_as`)."""
    target = out_file(out, compression, nodes, saved_as or policy, mode)
    flavors = ["--flavors"] if mode == "flavors" else []
    cmd = [
        sys.executable, "-m", "controller.simulate.main", "--json", "--quiet", "philly",
        "--compression", f"{compression:g}", "--nodes", nodes, "--policies", policy, *flavors,
        *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"FAILED {target.name}: {result.stderr[-400:]}"
    target.write_text(result.stdout)
    return f"done {target.name} in {time.perf_counter() - started:.0f}s"


def load(
    out: Path, compression: float, nodes: str, mode: str = "single"
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        path = out_file(out, compression, nodes, policy, mode)
        if path.exists():
            results[policy] = json.loads(path.read_text())["results"][0]
    return results


def setup_of(out: Path, compression: float, nodes: str, mode: str) -> dict[str, Any]:
    """The setup of the first saved run of a setting and mode."""
    for policy in POLICIES:
        path = out_file(out, compression, nodes, policy, mode)
        if path.exists():
            setup: dict[str, Any] = json.loads(path.read_text())["setup"]
            return setup
    return {}


def write_reports(out: Path, directory: Path) -> None:
    """One report per setting, from the saved JSON of its policies."""
    from controller.simulate.report import result_from_json, write_report

    for (compression, nodes), mode in itertools.product(SETTINGS, MODES):
        paths = [out_file(out, compression, nodes, p, mode) for p in POLICIES]
        runs = [json.loads(p.read_text()) for p in paths if p.exists()]
        if not runs:
            continue
        flavors = "-flavors" if mode == "flavors" else ""
        index = write_report(
            directory / f"philly-{compression:g}x-{nodes}{flavors}",
            [result_from_json(run["results"][0]) for run in runs],
            runs[0]["setup"],
            title=f"Philly {compression:g}x, {nodes} nodes"
            + (", GPU types as flavors" if flavors else ""),
            command=f"python {shlex.join(sys.argv)}  # one run per policy",
        )
        print(f"report: {index}", file=sys.stderr)


def hours(seconds: float | None) -> float:
    return float("nan") if seconds is None else seconds / 3600


def _number(value: float | None) -> float:
    return float("nan") if value is None else value


# Default kohort on main before issue 40 (commit ee17a28, starvation guard off), per setting
# (compression, nodes, mode): the p95 wait of all jobs and of gangs of 16+ GPUs (hours), and
# evictions per admitted gang, from `bench/bench_sim_philly.py --jobs 1 --policies
# kohort,gang-fifo,naive-reclaim` run on 2026-11-28. Issue 40's targets: the p95 no worse, the
# largest gangs' p95 at most halved, evictions per admitted gang not above.
BEFORE_ISSUE_40: dict[tuple[float, str, str], tuple[float, float, float]] = {
    (4.0, "homogeneous", "single"): (0.0, 0.0, 0.0),
    (4.0, "mixed", "single"): (0.0, 1.3536, 0.000190),
    (8.0, "homogeneous", "single"): (1.5698, 130.91, 0.001971),
    (8.0, "mixed", "single"): (2.8022, 179.40, 0.003066),
}


def evictions_per_admitted(r: dict[str, Any]) -> float:
    """Evictions per gang admitted (each job that ran to its end counts once)."""
    return float(r["evictions"]) / r["finished"] if r["finished"] else float("nan")


# Models of other systems, which kohort's fair share must match at least (naive-reclaim and
# kohort-spread are kohort's own core with other choices).
BASELINES = tuple(p for p in POLICIES if p not in ("naive-reclaim", "kohort", "kohort-spread"))


def targets(out: Path) -> None:
    """Issue 18's targets for default kohort, one row per target and setting."""
    rows: list[tuple[str, str, str, str, bool | None]] = []  # met None: reported only
    for (compression, nodes), mode in itertools.product(SETTINGS, MODES):
        results = load(out, compression, nodes, mode)
        k = results.get("kohort")
        if k is None:
            continue
        setting = f"{compression:g}x {nodes}" + (" flavors" if mode == "flavors" else "")

        def add(target: str, ours: str, bound: str, met: bool, setting: str = setting) -> None:
            rows.append((setting, target, ours, bound, met))

        if "gang-fifo" in results:
            theirs = results["gang-fifo"]["wait_p95"]
            ours_h, theirs_h = hours(k["wait_p95"]), hours(theirs)
            add(
                "p95 wait <= gang-fifo's",
                f"{ours_h:.2f} h",
                f"{theirs_h:.2f} h",
                ours_h <= theirs_h,
            )
        add("partial placements = 0", str(k["partial_jobs"]), "0", k["partial_jobs"] == 0)
        if "naive-reclaim" in results:
            bound = results["naive-reclaim"]["wasted_gpu_hours"] / 10
            wasted = k["wasted_gpu_hours"]
            add(
                "wasted GPU-h <= naive-reclaim's / 10",
                f"{wasted:.0f}",
                f"{bound:.0f}",
                wasted <= bound,
            )
        fair = {
            p: value
            for p in BASELINES
            if p in results and not math.isnan(value := _number(results[p]["fair_ratio_p5"]))
        }
        if fair:
            best = max(fair, key=lambda p: fair[p])
            ours_p5 = _number(k["fair_ratio_p5"])
            add(
                "fair p5 >= best baseline's",
                f"{ours_p5:.3f}",
                f"{fair[best]:.3f} {best}",
                ours_p5 >= fair[best],
            )
        before = BEFORE_ISSUE_40.get((compression, nodes, mode))
        large = hours(_number(k.get("wait_p95_large")))
        per_gang = evictions_per_admitted(k)
        if before is None:
            rows.append((setting, "largest gangs' p95 wait (16+ GPUs)", f"{large:.2f} h", "", None))
            rows.append((setting, "evictions per admitted gang", f"{per_gang:.4f}", "", None))
        else:
            p95 = hours(k["wait_p95"])
            add(
                "p95 wait <= before issue 40's",
                f"{p95:.2f} h",
                f"{before[0]:.2f} h",
                p95 <= before[0],
            )
            add(
                "largest gangs' p95 wait (16+ GPUs)",
                f"{large:.2f} h",
                f"{before[1] / 2:.2f} h (half of {before[1]:.2f})",
                large <= before[1] / 2,
            )
            add(
                "evictions per admitted gang",
                f"{per_gang:.4f}",
                f"{before[2]:.4f}",
                per_gang <= before[2],
            )
        jain = f"{k['jain_mean']:.3f}"
        rows.append((setting, "Jain's index (weighted), reported", jain, "", None))
    if not rows:
        return
    print("\n== targets of default kohort ==")
    print(f"{'setting':<24}{'target':<38}{'kohort':>10}  {'bound':<36}met")
    for setting, target, ours, bound, met in rows:
        verdict = "" if met is None else "yes" if met else "NO"
        print(f"{setting:<24}{target:<38}{ours:>10}  {bound:<36}{verdict}")
    judged = [met for *_, met in rows if met is not None]
    print(f"{sum(judged)} of {len(judged)} targets met")


def report(out: Path) -> None:
    for (compression, nodes), mode in itertools.product(SETTINGS, MODES):
        results = load(out, compression, nodes, mode)
        if not results:
            continue
        setup = setup_of(out, compression, nodes, mode)
        kind = "GPU types as flavors" if mode == "flavors" else "one GPU pool"
        print(
            f"\n== {setup.get('trace', 'philly')} ({setup.get('jobs', '?')} jobs),"
            f" {compression:g}x compressed, {nodes} nodes, {kind} =="
        )
        if mode == "flavors":
            print(f"  GPU types (flavor order): {setup.get('gpu_types')}")
        print(
            f"{'policy':<29}{'alloc%':>7}{'p50 wait h':>11}{'p95 wait h':>11}"
            f"{'GPU p95 h':>10}{'mean wait h':>12}"
            f"{'jain':>7}"
            f"{'fair p5':>8}{'partial':>8}{'idle GPU-h':>11}{'free GPU-h*':>12}"
            f"{'evict':>7}{'ev/recl':>8}"
            f"{'wasted GPU-h':>13}{'dec p50/p99 ms':>16}"
        )
        for policy, r in results.items():
            print(
                f"{policy:<29}{100 * r['gpu_allocation_mean']:>7.1f}"
                f"{hours(r.get('wait_p50')):>11.2f}{hours(r['wait_p95']):>11.2f}"
                f"{hours(r.get('wait_p95_by_gpu')):>10.2f}"
                f"{hours(r['wait_mean']):>12.2f}{r['jain_mean']:>7.3f}"
                f"{_number(r['fair_ratio_p5']):>8.3f}{r['partial_jobs']:>8d}"
                f"{r['partial_gpu_hours']:>11.0f}"
                f"{_number(r.get('idle_gpu_hours_while_1gpu_waits')):>12.0f}{r['evictions']:>7d}"
                f"{r['evictions_per_reclaim']:>8.2f}{r['wasted_gpu_hours']:>13.0f}"
                f"{r['decision_ms_p50']:>8.2f}/{r['decision_ms_p99']:.1f}"
            )
        print(f"  {COLUMN_NOTE}")
        by_size(results)
        for ours in ("kohort", "kohort-spread"):
            if ours in results:
                headline(ours, results)


def half_life_name(seconds: float) -> str:
    return f"kohort-h{seconds:g}"


def half_lives(out: Path, seconds: list[float]) -> None:
    """kohort's figures at each usage half-life, per setting; `worse` names the figures worse
    than at half-life 0 (waits, and the 9+ GPU gangs' p95, by more than 1%; Jain's index and
    fair p5 lower; more evictions or wasted GPU-hours)."""
    for (compression, nodes), mode in itertools.product(SETTINGS, MODES):
        rows = {}
        for h in seconds:
            path = out_file(out, compression, nodes, half_life_name(h), mode)
            if path.exists():
                rows[h] = json.loads(path.read_text())["results"][0]
        if not rows:
            continue
        flavors = " flavors" if mode == "flavors" else ""
        print(f"\n== kohort by usage half-life, {compression:g}x {nodes}{flavors} ==")
        print(
            f"{'half-life':>10}{'p50 h':>8}{'p95 h':>8}{'GPU p95 h':>10}{'mean h':>8}"
            f"{'9+ p95 h':>9}{'jain':>7}{'fair p5':>8}{'evict':>7}{'wasted':>8}  worse than 0"
        )
        base = rows.get(0.0)
        for h, r in rows.items():
            big = r.get("by_size", {}).get("9+ GPUs", {})
            print(
                f"{h / 3600:>8g} h{hours(r['wait_p50']):>8.2f}{hours(r['wait_p95']):>8.2f}"
                f"{hours(r['wait_p95_by_gpu']):>10.2f}{hours(r['wait_mean']):>8.2f}"
                f"{hours(big.get('wait_p95')):>9.2f}{r['jain_mean']:>7.3f}"
                f"{_number(r['fair_ratio_p5']):>8.3f}{r['evictions']:>7d}"
                f"{r['wasted_gpu_hours']:>8.0f}  {', '.join(_worse(r, base)) if base else '?'}"
            )


def _worse(r: dict[str, Any], base: dict[str, Any]) -> list[str]:
    def big(x: dict[str, Any]) -> float:
        return float(x.get("by_size", {}).get("9+ GPUs", {}).get("wait_p95", 0.0))

    worse = [
        key
        for key in ("wait_p50", "wait_p95", "wait_p95_by_gpu", "wait_mean")
        if r[key] > base[key] * 1.01 + 1.0
    ]
    if big(r) > big(base) * 1.01 + 1.0:
        worse.append("9+ p95")
    if r["jain_mean"] < base["jain_mean"] - 0.001:
        worse.append("jain")
    if _number(r["fair_ratio_p5"]) < _number(base["fair_ratio_p5"]) - 0.001:
        worse.append("fair p5")
    worse += [k for k in ("evictions", "wasted_gpu_hours") if r[k] > base[k] * 1.01 + 1]
    return worse or ["-"]


def compare_modes(out: Path) -> None:
    """Per setting run in both modes: each policy's figures with one GPU pool and with GPU
    types as flavors, side by side."""
    for compression, nodes in SETTINGS:
        single, flavors = (load(out, compression, nodes, m) for m in MODES)
        both = [p for p in POLICIES if p in single and p in flavors]
        if not both:
            continue
        print(
            f"\n== {compression:g}x {nodes}: one GPU pool / GPU types as flavors (wait in hours) =="
        )
        columns = ("alloc%", "wait p50", "wait p95", "wait mean", "partial", "unfinished")
        print(f"{'policy':<29}" + "".join(f"{c:>20}" for c in columns))
        for policy in both:
            a, b = single[policy], flavors[policy]
            cells = [
                f"{100 * a['gpu_allocation_mean']:.1f} / {100 * b['gpu_allocation_mean']:.1f}",
                f"{hours(a.get('wait_p50')):.2f} / {hours(b.get('wait_p50')):.2f}",
                f"{hours(a['wait_p95']):.2f} / {hours(b['wait_p95']):.2f}",
                f"{hours(a['wait_mean']):.2f} / {hours(b['wait_mean']):.2f}",
                f"{a['partial_jobs']} / {b['partial_jobs']}",
                f"{a['censored']} / {b['censored']}",
            ]
            print(f"{policy:<29}" + "".join(f"{c:>20}" for c in cells))


def by_size(results: dict[str, dict[str, Any]]) -> None:
    """Who makes the p95: wait per gang size, and each size's share of the jobs beyond it."""
    print("  wait by gang size (mean h / p95 h / share of the jobs waiting beyond the p95):")
    for policy, r in results.items():
        cells = [
            f"{size} {hours(f['wait_mean']):.2f}/{hours(f['wait_p95']):.2f}/"
            f"{f['share_of_tail']:.0%}"
            for size, f in r.get("by_size", {}).items()
        ]
        print(f"  {policy:<29}" + "   ".join(cells))


def headline(ours: str, results: dict[str, dict[str, Any]]) -> None:
    k = results[ours]
    for other in ("kube-default", "quota-drf"):
        if other in results:
            o = results[other]
            print(
                f"  {other}: {o['partial_jobs']} partial placements held"
                f" {o['partial_gpu_hours']:.0f} GPU-h idle; {ours}: {k['partial_jobs']}"
            )
    for other in (
        "quota-drf",
        "gang-fifo",
        "gang-fifo-binpack",
        "gang-fifo-no-enqueue",
        "gang-fifo-no-enqueue-binpack",
        "naive-reclaim",
    ):
        if other in results:
            theirs = results[other]["wait_p95"]
            ratio = f"{k['wait_p95'] / theirs:.2f}" if theirs else "n/a (their p95 is 0)"
            by_gpu = ""
            if results[other].get("wait_p95_by_gpu") and k.get("wait_p95_by_gpu") is not None:
                g_ours, g_theirs = k["wait_p95_by_gpu"], results[other]["wait_p95_by_gpu"]
                by_gpu = f"; by GPU {hours(g_ours):.2f}h / {hours(g_theirs):.2f}h"
                by_gpu += f" = {g_ours / g_theirs:.2f}"
            print(
                f"  p95 wait {ours} / {other}: {hours(k['wait_p95']):.2f}h /"
                f" {hours(theirs):.2f}h = {ratio}{by_gpu}"
            )
    if "naive-reclaim" in results:
        n = results["naive-reclaim"]
        waste = n["wasted_gpu_hours"]
        ratio = f"{k['wasted_gpu_hours'] / waste:.3f}" if waste else "n/a"
        print(
            f"  wasted GPU-h {ours} / naive-reclaim: {k['wasted_gpu_hours']:.0f} /"
            f" {waste:.0f} = {ratio} (target <= 0.1); evictions {k['evictions']} vs"
            f" {n['evictions']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel simulations")
    parser.add_argument("--out", type=Path, default=Path(".kohort/bench"))
    parser.add_argument("--only-report", action="store_true")
    parser.add_argument("--report", type=Path, metavar="DIR", help="also write plots into DIR")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--compressions", default="4,8")
    parser.add_argument("--nodes", default="homogeneous,mixed")
    parser.add_argument("--modes", default="single", help="comma list of single, flavors")
    parser.add_argument(
        "--half-lives", default="", help="seconds, comma list: kohort at each usage half-life"
    )
    parser.add_argument("extra", nargs="*", help="passed to `kohort simulate philly`")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        parser.error(f"--modes: of {', '.join(MODES)}")
    seconds = [float(h) for h in args.half_lives.split(",") if h]
    settings = [
        (float(c), n, m)
        for c in args.compressions.split(",")
        for n in args.nodes.split(",")
        for m in modes
    ]
    runs: list[Run] = [
        (c, n, "kohort", [*args.extra, "--usage-half-life", f"{h:g}"], m, half_life_name(h))
        for c, n, m in settings
        for h in seconds
    ] or [(c, n, p, args.extra, m, p) for c, n, m in settings for p in args.policies.split(",")]
    if not args.only_report:
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_one, args.out, *run) for run in runs]
            for future in futures:
                print(future.result(), file=sys.stderr, flush=True)
    if seconds:
        half_lives(args.out, seconds)
        return
    report(args.out)
    compare_modes(args.out)
    targets(args.out)
    if args.report is not None:
        write_reports(args.out, args.report)


if __name__ == "__main__":
    main()
