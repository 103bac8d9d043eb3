"""GPU allocation on Alibaba openb under the FGD protocol, against the paper's published figures.

    .venv/bin/python bench/bench_sim_openb.py [--seeds 42-51] [--tune 1.3]
        [--modes single,flavors] [--variant default] [--traces DIR]

Pods arrive in trace order and never leave; seeded random copies follow until GPU requests reach
130% of the 6,212 GPUs; a pod that does not fit when it arrives is dropped. kohort places whole
GPUs, so fractional-GPU pods are rounded up to one GPU (the paper shares GPUs and counts
fractions). Prints the median over seeds of the % of GPUs allocated at 100% and 130% arrived, for
our packing rules and the paper's policies, and the headline ratio kohort / paper BestFit.

--modes: `single` is one pool of GPUs (GPU models ignored, as before); `flavors` models the GPU
models as flavors (`kohort simulate openb --flavors`: typed nodes, a pod naming models runs only
on them, kohort and first-fit pick a flavor per pod). With both, a side-by-side table follows.
--variant: the pod list openb_pod_list_VARIANT.csv under --traces (the gpuspec* variants, which
name GPU models, are upstream only: see docs/simulator.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.simulate.openb import OPENB_POLICIES, run_openb
from controller.simulate.traces import DEFAULT_TRACES

PAPER_BESTFIT_130 = 93.11


def table(report: dict[str, Any]) -> None:
    print(f"\nopenb: {report['protocol']}; {report['nodes']} nodes, {report['gpus']} GPUs")
    print(f"{report['fractional_pods_rounded_up']} trace pods asked for a GPU fraction (-> 1 GPU)")
    print(f"pods: {report['variant']}, {report['pods_naming_a_model']} naming a GPU model")
    print(f"GPU types: {report['gpu_types']}")
    print(f"{'':<26}{'alloc% @100%':>14}{'alloc% @130%':>14}{'dropped':>9}")
    ours: dict[str, dict[str, float]] = report["ours"]
    for name, row in ours.items():
        label = f"ours {name} ({OPENB_POLICIES[name]})"
        print(
            f"{label:<26}{row['alloc_at_100_median']:>14.2f}{row['alloc_at_130_median']:>14.2f}"
            f"{row['dropped_median']:>9.0f}"
        )
    paper: dict[str, dict[int, float]] = report["published_median"]
    for name, marks in paper.items():
        at100, at130 = marks.get(100, math.nan), marks.get(130, math.nan)
        print(f"{'paper ' + name:<26}{at100:>14.2f}{at130:>14.2f}")


def side_by_side(single: dict[str, Any], flavors: dict[str, Any]) -> None:
    print("\none pool of GPUs against GPU models as flavors (medians over the seeds):")
    print(f"{'policy':<16}{'alloc% @100%':>24}{'alloc% @130%':>24}{'dropped':>18}")
    print(f"{'':<16}" + f"{'pool':>12}{'flavors':>12}" * 2 + f"{'pool':>9}{'flavors':>9}")
    for name in single["ours"]:
        a, b = single["ours"][name], flavors["ours"][name]
        print(
            f"{name:<16}{a['alloc_at_100_median']:>12.2f}{b['alloc_at_100_median']:>12.2f}"
            f"{a['alloc_at_130_median']:>12.2f}{b['alloc_at_130_median']:>12.2f}"
            f"{a['dropped_median']:>9.0f}{b['dropped_median']:>9.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--modes", default="single", help="comma list of single, flavors")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--flavor-order", default="", help="GPU types to try first, comma list")
    args = parser.parse_args()
    low, high = (int(x) for x in args.seeds.split("-"))
    order = tuple(t for t in args.flavor_order.split(",") if t)
    reports: dict[str, dict[str, Any]] = {}
    for mode in [m for m in args.modes.split(",") if m]:
        if mode not in ("single", "flavors"):
            parser.error(f"unknown mode {mode}")
        started = time.perf_counter()
        reports[mode] = run_openb(
            args.traces,
            seeds=range(low, high + 1),
            tune=args.tune,
            policies=tuple(OPENB_POLICIES),
            variant=args.variant,
            flavors=mode == "flavors",
            flavor_order=order,
        )
        table(reports[mode])
        print(f"({time.perf_counter() - started:.0f}s)")
    if "single" in reports and args.variant == "default":
        kohort = reports["single"]["ours"]["kohort"]["alloc_at_130_median"]
        print(
            f"headline: kohort {kohort:.2f}% at 130% arrived vs paper BestFit {PAPER_BESTFIT_130}%"
            f" -> {kohort / PAPER_BESTFIT_130:.3f}x (whole GPUs vs shared fractions; not like for"
            " like)"
        )
    if "single" in reports and "flavors" in reports:
        side_by_side(reports["single"], reports["flavors"])


if __name__ == "__main__":
    main()
