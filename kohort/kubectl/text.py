"""`kubectl kohort`'s tables and reports as text, for terminals 80 to 100 columns wide.

Rule: pure; takes the data of `views` and lays it out, nothing else.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

Data = dict[str, Any]
WIDTH = 100


def table(header: Sequence[str], rows: Sequence[Sequence[object]], last_wraps: bool = False) -> str:
    """Columns padded to their widest cell; with `last_wraps`, the last column is cut to fit
    WIDTH (its full text is in `-o json`)."""
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    if last_wraps:
        used = sum(w + 2 for w in widths[:-1])
        widths[-1] = max(len(header[-1]), min(widths[-1], WIDTH - used))
    lines = []
    for row in [list(header), *cells]:
        out = []
        for i, cell in enumerate(row):
            if last_wraps and i == len(row) - 1 and len(cell) > widths[i]:
                cell = cell[: max(widths[i] - 3, 0)] + "..."
            out.append(cell.ljust(widths[i]))
        lines.append("  ".join(out).rstrip())
    return "\n".join(lines)


def _resource(row: Data) -> str:
    flavor = row["flavor"] or "(any)"
    return f"{flavor}/{row['resource']}"


def queues(rows: Sequence[Data]) -> str:
    header = (
        "CLUSTERQUEUE",
        "COHORT",
        "PENDING",
        "ADMITTED",
        "FLAVOR/RESOURCE",
        "NOMINAL",
        "USAGE",
        "BORROWED",
        "SHARE",
    )
    out: list[list[object]] = []
    for q in rows:
        lead: list[object] = [q["name"], q["cohort"] or "-", q["pending"], q["admitted"]]
        for f in q["flavors"] or [None]:
            if f is None:
                out.append([*lead, "-", "-", "-", "-", q["share"]])
            else:
                figures = [f["nominal"], f["usage"], f["borrowed"]]
                out.append([*lead, _resource(f), *figures, q["share"] if lead[0] else ""])
            lead = ["", "", "", ""]
    return table(header, out)


def tree(forest: Sequence[Data]) -> str:
    lines: list[str] = []

    def walk(node: Data, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("`-- " if last else "|-- ")
        kind = "cohort" if node["kind"] == "Cohort" else "queue"
        lines.append(f"{prefix}{branch}{node['name']} ({kind}, share {node['share']})")
        inner = prefix + ("" if top else ("    " if last else "|   "))
        for f in node["flavors"]:
            if f["nominal"] == "0" and f["usage"] == "0":
                continue
            borrowed = f" borrowed {f['borrowed']}" if f["borrowed"] != "0" else ""
            lines.append(
                f"{inner}    {_resource(f)}: usage {f['usage']} of {f['nominal']}{borrowed}"
            )
        children = node["children"]
        for i, child in enumerate(children):
            walk(child, inner, i == len(children) - 1, False)

    for root in forest:
        walk(root, "", True, True)
    return "\n".join(lines)


def pending(rows: Sequence[Data]) -> str:
    """The backlog; the namespace is said once when all rows share it."""
    if not rows:
        return "No pending workloads."
    spaces = {r["namespace"] for r in rows}
    shared = spaces.pop() if len(spaces) == 1 else None
    header = ("POS", "IN-LQ", "IN-COHORT", "WORKLOAD", "LOCALQUEUE", "PRIO", "REASON")
    out = [
        [
            r["positionInClusterQueue"],
            r["positionInLocalQueue"],
            r["positionInCohort"],
            r["name"] if shared else f"{r['namespace']}/{r['name']}",
            r["localQueue"],
            r["priority"],
            r["reason"] or "-",
        ]
        for r in rows
    ]
    lines = table(header, out, last_wraps=True)
    return f"Namespace: {shared}\n{lines}" if shared else lines


def _wrapped(label: str, value: str) -> list[str]:
    return textwrap.wrap(
        value, WIDTH, initial_indent=f"{label:<14}", subsequent_indent=" " * 14
    ) or [label]


def _short(gang: str, namespace: str) -> str:
    """A gang's name, without its namespace when it is `namespace`."""
    return gang.removeprefix(f"{namespace}/")


def why(data: Data) -> str:
    namespace = data["namespace"]
    lines = _wrapped("Workload:", f"{data['namespace']}/{data['workload']}")
    if data["owner"]:
        lines += _wrapped("Owner:", ", ".join(data["owner"]))
    lines += _wrapped(
        "Queue:", f"LocalQueue {data['localQueue']} -> ClusterQueue {data['clusterQueue']}"
    )
    lines += _wrapped("State:", data["state"])
    if data["reason"]:
        lines += _wrapped("Reason:", data["reason"])
    at = data.get("position")
    if at:
        lines += _wrapped(
            "Position:",
            f"{at['clusterQueue']} in its ClusterQueue, {at['localQueue']} in its LocalQueue,"
            f" {at['cohort']} in its cohort",
        )
    ahead = data.get("ahead")
    if ahead is not None:
        shown = ", ".join(
            f"{a['position']}. {_short(a['workload'], namespace)} (priority {a['priority']})"
            for a in ahead[:5]
        )
        more = f" and {len(ahead) - 5} more" if len(ahead) > 5 else ""
        lines += _wrapped("Ahead of it:", (shown + more) if ahead else "nothing")
    if data["forecast"]:
        lines += _wrapped("Forecast:", ", ".join(f"{k}: {v}" for k, v in data["forecast"].items()))
    changes = data.get("wouldBeAdmittedNow")
    if changes is not None:
        lines.append("Would be admitted now:")
        lines += [f"  {line}" for line in _changes(changes, namespace)]
    return "\n".join(lines)


def _changes(changes: Data, namespace: str) -> list[str]:
    alone = changes.get("alone")
    if alone:
        evicting = f" (by evicting {alone['evicting']} gang(s))" if alone["evicting"] else ""
        return [f"as it is{evicting}: {alone['note']}"]
    out: list[str] = []
    fewer = changes.get("fewerPods")
    if fewer:
        pods, instead = fewer["pods"], fewer["insteadOf"]
        out.append(f"with {pods} pods in pod set {fewer['podSet']} instead of {instead}")
    else:
        out.append("with fewer pods: no")
    for f in changes.get("flavors", []):
        flavor = f["flavor"] or "(any)"
        out += textwrap.wrap(
            f"on flavor {flavor} alone: " + ("yes" if f["admitted"] else f"no: {f['why']}"),
            WIDTH - 2,
            subsequent_indent="  ",
        )
    finishing = changes.get("finishing")
    if finishing and "anyOneOf" in finishing:
        smallest = finishing["smallest"]
        others = [_short(n, namespace) for n in finishing["anyOneOf"] if n != smallest]
        rest = f" (or once {' or '.join(others)} does)" if others else ""
        text = f"once {_short(smallest, namespace)} finishes{rest}"
        out += textwrap.wrap(text, WIDTH - 2, subsequent_indent="  ")
    elif finishing:
        gangs = ", ".join(_short(n, namespace) for n in finishing["allOf"])
        out += textwrap.wrap(f"once all of {gangs} finish", WIDTH - 2, subsequent_indent="  ")
    else:
        out.append("once running gangs finish: no (it does not fit even on an empty cluster)")
    return out
