"""`kohort simulate`: replay a cluster trace through scheduling policies and compare them.

kohort simulate philly --compression 8 --nodes homogeneous      # table
kohort simulate philly --compression 8 --nodes mixed --json     # JSON
kohort simulate philly --policies gang-fifo,kohort --report DIR  # + plots and DIR/report.md
kohort simulate philly --nodes mixed --flavors                   # GPU types as flavors
kohort simulate philly --topology-layout racks8x4 --topology required   # kohort vs kueue-tas
kohort simulate openb --seeds 42-51                              # FGD allocation protocol
kohort simulate openb --seeds 42-51 --flavors                    # GPU models as flavors
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from controller import defaults
from controller.quota import Config, FlavorSpec
from controller.simulate.flavors import GpuTypes
from controller.simulate.loop import QueueShares, Result, simulate
from controller.simulate.openb import OPENB_POLICIES, run_openb
from controller.simulate.policies import POLICIES, TOPOLOGY_POLICIES, make_policy
from controller.simulate.topology import (
    LARGE_GANG_GPUS,
    Layout,
    RequestPolicy,
    TopologyFigures,
    TopologyMeter,
    flavors_with_topology,
)
from controller.simulate.topology import describe as describe_layout
from controller.simulate.traces import (
    CPU_PER_GPU,
    DEFAULT_TRACES,
    GPU_UNIT,
    MEMORY_PER_GPU,
    load_philly,
    philly_nodes,
    philly_queues,
    with_elastic,
)


def _add_flavor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--flavors",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="model GPU types: typed nodes, one flavor per type, each queue's GPU quota split"
        " by type, jobs naming a model kept to it (default: one pool of GPUs)",
    )
    parser.add_argument(
        "--flavor-order",
        default="",
        help="with --flavors: GPU types to try first, comma list; the rest follow, most GPUs"
        " first (default: all of them most GPUs first)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="trace folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    philly = sub.add_parser("philly", help="Microsoft Philly jobs, queues = virtual clusters")
    philly.add_argument("--compression", type=float, default=8.0, help="divide arrival times")
    philly.add_argument("--nodes", choices=("homogeneous", "mixed"), default="homogeneous")
    philly.add_argument(
        "--policies",
        default=None,
        help=f"comma list of {', '.join(POLICIES + TOPOLOGY_POLICIES)} (default: all but"
        " kueue-tas; with --topology-layout: kohort,kueue-tas)",
    )
    philly.add_argument("--start", default="2017-10-01", help="first submit date (inclusive)")
    philly.add_argument("--end", default="2017-12-01", help="last submit date (exclusive)")
    philly.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    philly.add_argument(
        "--pod-gpus",
        type=int,
        default=8,
        help="a job of n GPUs is a gang of ceil(n / this) pods (default 8: one pod per 8-GPU node)",
    )
    philly.add_argument(
        "--elastic",
        type=float,
        default=0.0,
        help="this share of the jobs of 2 pods or more (the same in every run) is elastic, down"
        " to half its pods; one admitted with fewer GPUs runs longer in proportion (default 0)",
    )
    philly.add_argument(
        "--min-runtime",
        type=float,
        default=float(defaults.MINIMUM_RUNTIME_SECONDS),
        help="kohort: seconds before preemptible (each queue's minimumRuntimeSeconds)",
    )
    philly.add_argument(
        "--starvation-after",
        type=float,
        default=float(defaults.STARVATION_AFTER_SECONDS),
        help="kohort: seconds after which a waiting gang holds quota and nodes (0: off)",
    )
    philly.add_argument(
        "--backfill",
        action=argparse.BooleanOptionalAction,
        default=defaults.STARVATION_BACKFILL,
        help="kohort: the starvation guard reserves the nodes that free up first, which gangs"
        " done before then may use, instead of holding nodes idle",
    )
    philly.add_argument(
        "--evict-after",
        type=float,
        default=float(defaults.EVICT_AFTER_SECONDS),
        help="kohort: seconds before a gang may evict (each queue's evictAfterSeconds)",
    )
    philly.add_argument(
        "--drain",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="kohort: hold nodes for queues under nominal while they wait to evict",
    )
    philly.add_argument(
        "--waste-budget",
        type=float,
        default=defaults.WASTE_BUDGET,
        help="kohort: victims may lose at most this x the preemptor's wait (<0: no limit)",
    )
    philly.add_argument(
        "--oldest-first-after",
        type=float,
        default=-1.0,
        help="kohort: heads waiting longer than this go first, oldest first (<0: off)",
    )
    philly.add_argument(
        "--usage-half-life",
        type=float,
        default=float(defaults.USAGE_HALF_LIFE_SECONDS),
        help="kohort: fair order adds each queue's recent borrowing, this half-life (0: off)",
    )
    philly.add_argument(
        "--weights",
        choices=("equal", "size"),
        default="equal",
        help="fair-sharing weight of each queue: 1, or its VC's size over the mean",
    )
    philly.add_argument(
        "--packing",
        choices=("best-fit", "spread", "first-fit"),
        default=Config.measured().packing,
        help="node choice of kohort and naive-reclaim",
    )
    philly.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="also write plots comparing the policies and DIR/report.md showing them",
    )
    _add_flavor_arguments(philly)
    philly.add_argument(
        "--topology-layout",
        metavar="racksNxM",
        help="racks of N nodes, blocks of M racks over the nodes (labels, a topology on every"
        " flavor, the topology figures); default: no topology",
    )
    philly.add_argument(
        "--topology",
        choices=("required", "preferred", "none"),
        default="required",
        help="with --topology-layout: what a gang of 2+ pods asks for (one rack if it fits one,"
        " else one block)",
    )
    openb = sub.add_parser("openb", help="Alibaba openb, FGD allocation protocol (no departures)")
    openb.add_argument("--seeds", default="42-51", help="seed range A-B or comma list")
    openb.add_argument("--tune", type=float, default=1.3, help="arrivals up to this x GPU capacity")
    openb.add_argument(
        "--policies", default=",".join(OPENB_POLICIES), help=f"of {', '.join(OPENB_POLICIES)}"
    )
    openb.add_argument(
        "--variant",
        default="default",
        help="pod list openb_pod_list_VARIANT.csv (gpuspec* variants name GPU models)",
    )
    _add_flavor_arguments(openb)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "report", None) is not None and importlib.util.find_spec("matplotlib") is None:
        print(
            "kohort simulate: --report draws its plots with matplotlib, which this installation"
            " lacks (kohort's image leaves it out): pip install 'kohort[report]'",
            file=sys.stderr,
        )
        return 2
    if args.scenario == "openb":
        return _run_openb(args)
    return _run_philly(args)


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",") if s]


def _run_openb(args: argparse.Namespace) -> int:
    report = run_openb(
        args.traces,
        seeds=_seeds(args.seeds),
        tune=args.tune,
        policies=[p for p in args.policies.split(",") if p],
        variant=args.variant,
        flavors=args.flavors,
        flavor_order=_order(args.flavor_order),
    )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"openb: {report['protocol']}; {report['nodes']} nodes, {report['gpus']} GPUs;")
    print(f"{report['fractional_pods_rounded_up']} fractional-GPU pods rounded up to 1 GPU")
    print(f"pods {report['variant']}, {report['pods_naming_a_model']} naming a GPU model;")
    print(f"GPU types: {report['gpu_types']}")
    print(f"{'policy':<24}{'alloc% @100%':>14}{'alloc% @130%':>14}{'dropped':>9}")
    ours: dict[str, dict[str, float]] = report["ours"]  # type: ignore[assignment]
    for name, row in ours.items():
        print(
            f"{'ours ' + name:<24}{row['alloc_at_100_median']:>14.2f}"
            f"{row['alloc_at_130_median']:>14.2f}{row['dropped_median']:>9.0f}"
        )
    paper: dict[str, dict[int, float]] = report["published_median"]  # type: ignore[assignment]
    for name, marks in paper.items():
        at100, at130 = marks.get(100, math.nan), marks.get(130, math.nan)
        print(f"{'paper ' + name:<24}{at100:>14.2f}{at130:>14.2f}")
    print("(paper figures count GPU fractions; ours count whole GPUs)")
    return 0


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """make_policy's options from `kohort simulate philly`'s flags."""
    return {
        "min_runtime": args.min_runtime,
        "starvation_after": args.starvation_after if args.starvation_after > 0 else None,
        "backfill": args.backfill,
        "evict_after": args.evict_after,
        "drain": args.drain,
        "waste_budget": args.waste_budget if args.waste_budget >= 0 else None,
        "oldest_first_after": args.oldest_first_after if args.oldest_first_after >= 0 else None,
        "usage_half_life": max(0.0, args.usage_half_life),
        "packing": args.packing,
    }


def _order(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _run_philly(args: argparse.Namespace) -> int:
    trace = load_philly(
        args.traces,
        start=args.start,
        end=args.end,
        compression=args.compression,
        pod_gpus=args.pod_gpus,
    )
    jobs = trace.jobs[: args.limit] if args.limit else trace.jobs
    if args.elastic > 0:
        jobs = tuple(with_elastic(jobs, args.elastic))
    nodes = philly_nodes(args.traces, mixed=args.nodes == "mixed", typed=args.flavors)
    total_gpus = sum(n.allocatable.get("nvidia.com/gpu", 0) for n in nodes) // GPU_UNIT
    queues = philly_queues(trace.vc_nodes, total_gpus, weight_by_size=args.weights == "size")
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    flavors: tuple[FlavorSpec, ...] = ()
    types: GpuTypes | None = None
    if args.flavors:
        # Philly's jobs name no GPU model: every job may take either type.
        types = GpuTypes.of(nodes, order=_order(args.flavor_order))
        nodes = types.label(nodes)
        queues = tuple(types.split(q) for q in queues)
        flavors = types.flavors()
    mode = "flavors" if args.flavors else "one GPU pool"
    layout = Layout.parse(args.topology_layout) if args.topology_layout else None
    requests: RequestPolicy | None = None
    if layout is not None:
        nodes = layout.label(nodes)
        flavors = flavors_with_topology(flavors)
        requests = RequestPolicy.of(args.topology, nodes)
        jobs = requests.apply(jobs)
        mode += f" {layout.name} {args.topology}"
    default_policies = "kohort,kueue-tas" if layout is not None else ",".join(POLICIES)
    progress = None if args.quiet else sys.stderr
    results: list[Result] = []
    for name in [p for p in (args.policies or default_policies).split(",") if p]:
        policy = make_policy(name, queues, nodes, flavors=flavors, **policy_options(args))
        meter = None
        if layout is not None and requests is not None:
            meter = TopologyMeter.of(layout, nodes, requests, jobs)
        results.append(
            simulate(
                jobs,
                policy,
                total_gpus=total_gpus,
                weights=weights,
                progress=progress,
                label=f"philly {args.compression:g}x {args.nodes} {mode} ",
                meter=meter,
            )
        )
    setup = {
        "trace": f"philly {args.start}..{args.end}",
        "jobs": len(jobs),
        "compression": args.compression,
        **({"pod_gpus": args.pod_gpus} if args.pod_gpus != 8 else {}),
        **({"elastic_share": args.elastic} if args.elastic > 0 else {}),
        "nodes": f"{args.nodes}: {len(nodes)} nodes, {total_gpus} GPUs",
        "gpu_types": types.describe() if types is not None else "one pool",
        "per_gpu": f"{CPU_PER_GPU / 1000:g} CPU, {MEMORY_PER_GPU // 1000 // 2**30} GiB",
        "queues": {q.name: weights[q.name] for q in queues},
        "weights": args.weights,
        "packing": args.packing,
        "kohort_min_runtime_s": args.min_runtime,
        "kohort_starvation_after_s": args.starvation_after,
        "kohort_backfill": args.backfill,
        "kohort_evict_after_s": args.evict_after,
        "kohort_drain": args.drain,
        "kohort_waste_budget": args.waste_budget,
        "kohort_oldest_first_after_s": args.oldest_first_after,
        "kohort_usage_half_life_s": args.usage_half_life,
    }
    if layout is not None and requests is not None:
        setup["topology_layout"] = describe_layout(layout, nodes)
        setup["topology_requests"] = requests.describe()
    if args.report is not None:
        from controller.simulate.report import write_report

        index = write_report(
            args.report,
            results,
            setup,
            title=f"Philly {args.compression:g}x, {args.nodes} nodes"
            + (", GPU types as flavors" if args.flavors else ""),
            command=_command_line(),
        )
        if not args.quiet:
            print(f"report: {index}", file=sys.stderr)
    if args.json:
        print(_dumps({"setup": setup, "results": [_jsonable(r) for r in results]}))
        return 0
    _print_table(setup, results)
    return 0


def _command_line() -> str:
    """This run's command, as `kohort simulate ...` (for the report)."""
    words = sys.argv[1:]
    if words[:1] == ["simulate"]:
        words = words[1:]
    return shlex.join(["kohort", "simulate", *words])


def _dumps(data: dict[str, Any]) -> str:
    """Indented JSON with each list of plain values on one line (the series are long)."""
    text = json.dumps(data, indent=2)
    return re.sub(
        r"\[\s+([^\[\]{}\"]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m[1]) + "]", text
    )


def _jsonable(result: Result) -> dict[str, Any]:
    from controller.simulate.report import plot_data

    # Per-job waits and the full share series stay out; `plot_data` is their compact form.
    lean = replace(result, waits=[], censored_waits=[], queue_shares=QueueShares())
    fields = asdict(lean)
    for name in ("waits", "censored_waits", "queue_shares"):
        del fields[name]
    if result.topology is None:
        del fields["topology"]
    fields["plot_data"] = plot_data(result)
    data: dict[str, Any] = json.loads(json.dumps(fields, default=str).replace("NaN", "null"))
    return data


# What the two GPU-hour columns of the table count.
COLUMN_NOTE = "idle GPU-h: held by partial placements; *free GPU-h: free while a 1-GPU job waited"


def _print_table(setup: dict[str, Any], results: list[Result]) -> None:
    pods = f", pods of at most {setup['pod_gpus']} GPUs" if "pod_gpus" in setup else ""
    print(
        f"{setup['trace']}, {setup['jobs']} jobs, {setup['compression']:g}x compressed{pods},"
        f" {setup['nodes']}; per GPU {setup['per_gpu']}"
    )
    print(f"GPU types: {setup['gpu_types']}")
    if "elastic_share" in setup and results:
        admitted = ", ".join(f"{r.policy} {r.partially_admitted}" for r in results)
        shrunk = ", ".join(f"{r.policy} {r.shrinks}" for r in results)
        print(
            f"elastic: {results[0].elastic_jobs} jobs (share {setup['elastic_share']:g} of those"
            f" of 2 pods or more), last started with fewer GPUs: {admitted}; shrunk in place"
            f" instead of evicted: {shrunk}"
        )
    if "topology_layout" in setup:
        print(f"topology: {setup['topology_layout']}")
        print(f"topology requests: {setup['topology_requests']}")
    columns: list[tuple[str, str, Callable[[Result], object]]] = [
        ("policy", "{:<29}", lambda r: r.policy),
        ("alloc%", "{:>7.1f}", lambda r: 100 * r.gpu_allocation_mean),
        ("wait p50 h", "{:>11.2f}", lambda r: r.wait_p50 / 3600),
        ("wait p95 h", "{:>11.2f}", lambda r: r.wait_p95 / 3600),
        ("by GPU p95 h", "{:>13.2f}", lambda r: r.wait_p95_by_gpu / 3600),
        ("wait mean h", "{:>12.2f}", lambda r: r.wait_mean / 3600),
        ("jct mean h", "{:>11.2f}", lambda r: r.jct_mean / 3600),
        ("jain", "{:>6.3f}", lambda r: r.jain_mean),
        ("fair min", "{:>9.3f}", lambda r: r.fair_ratio_worst),
        ("fair p5", "{:>8.3f}", lambda r: r.fair_ratio_p5),
        ("partial", "{:>8d}", lambda r: r.partial_jobs),
        ("idle GPU-h", "{:>11.0f}", lambda r: r.partial_gpu_hours),
        ("free GPU-h*", "{:>12.0f}", lambda r: r.idle_gpu_hours_while_1gpu_waits),
        ("evict", "{:>7d}", lambda r: r.evictions),
        ("ev/recl", "{:>8.1f}", lambda r: r.evictions_per_reclaim),
        ("wasted GPU-h", "{:>13.0f}", lambda r: r.wasted_gpu_hours),
        ("unfinished", "{:>11d}", lambda r: r.censored),
        ("dec p99 ms", "{:>11.2f}", lambda r: r.decision_ms_p99),
    ]
    widths = [len(fmt.format(get(results[0]))) if results else 8 for _, fmt, get in columns]
    header = "".join(
        f"{title:<{w}}" if i == 0 else f"{title:>{w}}"
        for i, ((title, _, _), w) in enumerate(zip(columns, widths, strict=True))
    )
    print(header)
    for r in results:
        print("".join(fmt.format(get(r)) for _, fmt, get in columns))
    print(COLUMN_NOTE)
    print("\nwait by gang size: mean h / p95 h / share of the jobs beyond the overall p95")
    sizes = list(results[0].by_size) if results else []
    print(f"{'size':<10}" + "".join(f"{r.policy:>22}" for r in results))
    for size in sizes:
        cells = []
        for r in results:
            f = r.by_size[size]
            cells.append(f"{f.wait_mean / 3600:.2f}/{f.wait_p95 / 3600:.2f}/{f.share_of_tail:.0%}")
        print(f"{size:<10}" + "".join(f"{c:>22}" for c in cells))
    if any(r.topology is not None for r in results):
        _print_topology(results)
    print("\nper-queue wait p95 (h):")
    queues = sorted(results[0].queues) if results else []
    print(f"{'queue':<10}" + "".join(f"{r.policy:>15}" for r in results))
    for q in queues:
        print(f"{q:<10}" + "".join(f"{r.queues[q].wait_p95 / 3600:>15.2f}" for r in results))


def _print_topology(results: list[Result]) -> None:
    """The figures of the choice of domains (docs/simulator.md, "Topology")."""
    rows = [(r, r.topology) for r in results if r.topology is not None]
    gang = rows[0][1].gang_nodes if rows else 0
    print(
        "\ntopology: starts inside the domain asked for (required; preferred: its level / one"
        " block / all);\np95 waits; time-weighted over the racks of the largest nodes: racks"
        " with no pod, time with a rack\nwholly free, time with a rack of"
        f" {gang} empty nodes (the largest gang asking for a rack fills {gang}), and of the"
        " time\nwith a rack's GPUs free in all, the share with no rack wholly free (fragmented)"
    )
    columns: list[tuple[str, str, Callable[[Result, TopologyFigures], object]]] = [
        ("policy", "{:<29}", lambda r, t: r.policy),
        ("required in", "{:>16}", lambda r, t: f"{t.required_within}/{t.required_starts}"),
        ("req in %", "{:>9.1f}", lambda r, t: 100 * t.required_within_share),
        (
            "pref in/block/all",
            "{:>19}",
            lambda r, t: f"{t.preferred_within}/{t.preferred_within_block}/{t.preferred_starts}",
        ),
        ("wait p95 h", "{:>11.2f}", lambda r, t: r.wait_p95 / 3600),
        (f"{LARGE_GANG_GPUS}+GPU p95 h", "{:>14.2f}", lambda r, t: t.wait_p95_large / 3600),
        ("alloc%", "{:>7.1f}", lambda r, t: 100 * r.gpu_allocation_mean),
        ("racks free%", "{:>12.1f}", lambda r, t: 100 * t.racks_whole_free_mean),
        ("whole rack%", "{:>12.1f}", lambda r, t: 100 * t.whole_rack_fits),
        (f"{gang}-node gang%", "{:>15.1f}", lambda r, t: 100 * t.gang_fits),
        ("fragmented%", "{:>12.1f}", lambda r, t: 100 * t.fragmented),
    ]
    widths = [len(fmt.format(get(*rows[0]))) for _, fmt, get in columns] if rows else []
    print(
        "".join(
            f"{title:<{w}}" if i == 0 else f"{title:>{w}}"
            for i, ((title, _, _), w) in enumerate(zip(columns, widths, strict=True))
        )
    )
    for r, t in rows:
        print("".join(fmt.format(get(r, t)) for _, fmt, get in columns))


def main() -> int:
    """Run without the `kohort` CLI (which imports every component): python -m ..."""
    parser = argparse.ArgumentParser(prog="kohort simulate", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
