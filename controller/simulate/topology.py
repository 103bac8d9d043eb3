"""Racks and blocks over a trace's machines, topology requests for its gangs, and what the
choice of domains costs: gangs kept inside their domain, racks left whole.

Rule: derived from the node list, the stated layout and the jobs only; every choice is stated
here (and in docs/simulator.md), and nothing changes without a layout.

- Layout `racksNxM`: racks of N nodes, blocks of M racks. Nodes are grouped by GPUs per node,
  the largest first (Philly's homogeneous list: one group; the mixed machine list: the 231 8-GPU
  machines, then the 321 2-GPU ones), each group in the order of its node list, and cut into
  racks and blocks in that order, so that no rack mixes machine sizes; a group's last rack and
  last block may be short. Rack and block values are unique in the cluster (`b03`, `b03-r2`).
- Every node is labelled with its block, its rack and `kubernetes.io/hostname` (its name); every
  flavor (the default flavor of one GPU pool, or each GPU type's) gets the topology LEVELS.
- Requests (`RequestRule`): a gang of more than one pod asks for one rack when its GPUs are at
  most a rack's (the largest rack's GPUs), else for one block when at most a block's, else for
  nothing; a one-pod gang asks for nothing (one node is one domain of every level). `required`
  or `preferred` as the rule says; `none` gives no request (the layout alone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from controller.quota.snapshot import DEFAULT_FLAVOR, GPU, FlavorSpec, Node, TopologyRequest
from controller.simulate.metrics import percentile
from controller.simulate.traces import GPU_UNIT, Job

BLOCK_LABEL = "topology.kohort.dev/block"
RACK_LABEL = "topology.kohort.dev/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
LEVELS = (BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL)

RequestRule = Literal["required", "preferred", "none"]
# Gangs of at least this many GPUs get their own p95 wait.
LARGE_GANG_GPUS = 16


def _gpus(node: Node) -> int:
    return node.allocatable.get(GPU, 0) // GPU_UNIT


@dataclass(frozen=True, slots=True)
class Layout:
    """Racks of `per_rack` nodes, blocks of `per_block` racks."""

    per_rack: int
    per_block: int

    @classmethod
    def parse(cls, text: str) -> Layout:
        """`racksNxM`: racks of N nodes, blocks of M racks."""
        found = re.fullmatch(r"racks(\d+)x(\d+)", text)
        if found is None or int(found[1]) < 1 or int(found[2]) < 1:
            raise ValueError(f"a layout is racksNxM (racks of N nodes, blocks of M racks): {text}")
        return cls(int(found[1]), int(found[2]))

    @property
    def name(self) -> str:
        return f"racks{self.per_rack}x{self.per_block}"

    def label(self, nodes: Sequence[Node]) -> tuple[Node, ...]:
        """`nodes` (in their order) labelled with block, rack and hostname (the module's rule)."""
        sizes = sorted({_gpus(n) for n in nodes}, reverse=True)
        labels: dict[str, dict[str, str]] = {}
        blocks = 0
        for size in sizes:
            group = [n for n in nodes if _gpus(n) == size]
            for k, node in enumerate(group):
                rack = k // self.per_rack
                block = f"b{blocks + rack // self.per_block:02d}"
                labels[node.name] = {
                    BLOCK_LABEL: block,
                    RACK_LABEL: f"{block}-r{rack % self.per_block}",
                    HOSTNAME_LABEL: node.name,
                }
            racks = -(-len(group) // self.per_rack)
            blocks += -(-racks // self.per_block)
        return tuple(replace(n, labels={**n.labels, **labels[n.name]}) for n in nodes)


def domains_of(nodes: Iterable[Node], key: str) -> dict[str, list[Node]]:
    """The nodes of each value of label `key`."""
    out: dict[str, list[Node]] = {}
    for node in nodes:
        value = node.labels.get(key)
        if value is not None:
            out.setdefault(value, []).append(node)
    return out


def describe(layout: Layout, nodes: Sequence[Node]) -> str:
    """The layout in words, with its racks and blocks per node size."""
    parts = []
    racks = domains_of(nodes, RACK_LABEL)
    blocks = domains_of(nodes, BLOCK_LABEL)
    for size in sorted({_gpus(n) for n in nodes}, reverse=True):
        mine = [r for r, ns in racks.items() if _gpus(ns[0]) == size]
        mine_blocks = [b for b, ns in blocks.items() if _gpus(ns[0]) == size]
        short = [r for r in mine if len(racks[r]) < layout.per_rack]
        parts.append(
            f"{size}-GPU nodes: {len(mine)} racks in {len(mine_blocks)} blocks"
            + (f" ({len(short)} short)" if short else "")
        )
    return (
        f"{layout.name}: racks of {layout.per_rack} nodes, blocks of {layout.per_block} racks,"
        f" nodes grouped by GPUs per node in list order; {'; '.join(parts)}"
    )


def flavors_with_topology(flavors: Sequence[FlavorSpec]) -> tuple[FlavorSpec, ...]:
    """Every flavor with the topology LEVELS; none given: the default flavor with them."""
    if not flavors:
        return (FlavorSpec(DEFAULT_FLAVOR, topology=LEVELS),)
    return tuple(replace(f, topology=LEVELS) for f in flavors)


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """The module's rule for gangs' requests, with the sizes of the largest rack and block."""

    rule: RequestRule
    rack_gpus: int
    block_gpus: int

    @classmethod
    def of(cls, rule: RequestRule, nodes: Sequence[Node]) -> RequestPolicy:
        def largest(key: str) -> int:
            return max((sum(map(_gpus, ns)) for ns in domains_of(nodes, key).values()), default=0)

        return cls(rule, largest(RACK_LABEL), largest(BLOCK_LABEL))

    def request(self, job: Job) -> TopologyRequest | None:
        pods = sum(n for n, _ in job.groups)
        if self.rule == "none" or pods < 2:
            return None
        required = self.rule == "required"
        if job.gpus <= self.rack_gpus:
            return TopologyRequest(RACK_LABEL, required=required)
        if job.gpus <= self.block_gpus:
            return TopologyRequest(BLOCK_LABEL, required=required)
        return None

    def apply(self, jobs: Iterable[Job]) -> tuple[Job, ...]:
        return tuple(replace(j, topology=self.request(j)) for j in jobs)

    def describe(self) -> str:
        if self.rule == "none":
            return "none (no gang asks for a domain)"
        return (
            f"{self.rule}: a gang of 2+ pods asks for one rack if its GPUs <= {self.rack_gpus},"
            f" else one block if <= {self.block_gpus}; one-pod gangs ask nothing"
        )


@dataclass(slots=True)
class TopologyFigures:
    """What the choice of domains did over a run (docs/simulator.md, "Topology")."""

    layout: str
    requests: str
    # Starts (first runs and restarts) of gangs with a request, and those placed inside one
    # domain of the level they asked for (checked on the nodes their pods got).
    required_starts: int
    required_within: int
    preferred_starts: int
    preferred_within: int
    # Of the starts with a preferred request: inside one block.
    preferred_within_block: int
    # Wait of the finished gangs of LARGE_GANG_GPUS GPUs or more.
    large_gangs: int
    wait_p95_large: float
    # Over the racks of the largest nodes, time-weighted: the mean share of racks with no pod,
    # the share of time some rack had no pod (a gang of a whole rack would have fitted), the
    # share of time some rack had `gang_nodes` empty nodes (as many as the GPUs of the largest
    # gang asking for a rack fill), and, of the time the free GPUs on those nodes came to a
    # rack's, the share with no rack wholly free (fragmentation).
    racks_whole_free_mean: float
    whole_rack_fits: float
    gang_nodes: int
    gang_fits: float
    fragmented: float

    @property
    def required_within_share(self) -> float:
        return self.required_within / self.required_starts if self.required_starts else 1.0


@dataclass(slots=True)
class TopologyMeter:
    """Follows which nodes running gangs hold, over simulated time (the loop calls it)."""

    layout: str
    requests: str
    gang_nodes: int
    rack_of: dict[str, str]
    block_of: dict[str, str]
    # The nodes of the largest size, whose racks the fragmentation figures are about.
    tracked: frozenset[str]
    rack_size: dict[str, int]
    full_rack: int  # nodes of the largest such rack
    rack_gpus: int  # its GPUs
    used: dict[str, int] = field(default_factory=dict)  # node -> GPUs held
    held: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # job -> (node, GPUs)
    empty: dict[str, int] = field(default_factory=dict)  # rack -> nodes with nothing on them
    free_gpus: int = 0
    last: float | None = None
    span: float = 0.0
    areas: dict[str, float] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, layout: Layout, nodes: Sequence[Node], requests: RequestPolicy, jobs: Sequence[Job]
    ) -> TopologyMeter:
        """A meter of `jobs` (with their requests) on `nodes` (labelled by `layout`)."""
        top = max((_gpus(n) for n in nodes), default=0)
        large = [n for n in nodes if _gpus(n) == top and RACK_LABEL in n.labels]
        racks = domains_of(large, RACK_LABEL)
        full = max((len(ns) for ns in racks.values()), default=0)
        asking = [
            -(-j.gpus // max(1, top))
            for j in jobs
            if j.topology is not None and j.topology.level == RACK_LABEL
        ]
        return cls(
            layout=describe(layout, nodes),
            requests=requests.describe(),
            gang_nodes=min(max(asking, default=full), full),
            rack_of={n.name: n.labels.get(RACK_LABEL, "") for n in nodes},
            block_of={n.name: n.labels.get(BLOCK_LABEL, "") for n in nodes},
            tracked=frozenset(n.name for n in large),
            rack_size={r: len(ns) for r, ns in racks.items()},
            full_rack=full,
            rack_gpus=full * top,
            empty={r: len(ns) for r, ns in racks.items()},
            free_gpus=top * len(large),
        )

    def advance(self, now: float) -> None:
        """Count the time since the last call in the state held since."""
        if self.last is not None and now > self.last:
            dt = now - self.last
            whole = sum(1 for r, e in self.empty.items() if e == self.rack_size[r])
            full = any(e == self.full_rack for e in self.empty.values())
            fits = any(e >= self.gang_nodes for e in self.empty.values())
            self.span += dt
            self._add("whole", whole / max(1, len(self.empty)) * dt)
            self._add("full", dt if full else 0.0)
            self._add("fits", dt if fits else 0.0)
            if self.free_gpus >= self.rack_gpus:
                self._add("enough", dt)
                self._add("fragmented", 0.0 if full else dt)
        self.last = now if self.last is None else max(self.last, now)

    def _add(self, name: str, amount: float) -> None:
        self.areas[name] = self.areas.get(name, 0.0) + amount

    def start(self, job: Job, nodes: Mapping[str, int]) -> None:
        """`job` started with `nodes` (node -> its pods' GPUs there)."""
        kept = [(n, g) for n, g in nodes.items() if n in self.tracked]
        for node, gpus in kept:
            self._take(node, gpus)
        self.held[job.name] = kept
        request = job.topology
        if request is None or request.level is None:
            return
        kind = "required" if request.required else "preferred"
        self._count(f"{kind}_starts")
        if self._within(nodes, request.level):
            self._count(f"{kind}_within")
        if not request.required and self._within(nodes, BLOCK_LABEL):
            self._count("preferred_within_block")

    def _within(self, nodes: Iterable[str], key: str) -> bool:
        """Whether every node is in one domain of level `key`."""
        values = {self._value(n, key) for n in nodes}
        return len(values) == 1 and None not in values

    def _value(self, node: str, key: str) -> str | None:
        if key == RACK_LABEL:
            return self.rack_of.get(node) or None
        if key == BLOCK_LABEL:
            return self.block_of.get(node) or None
        return node if key == HOSTNAME_LABEL else None

    def _count(self, name: str) -> None:
        self.starts[name] = self.starts.get(name, 0) + 1

    def _take(self, node: str, gpus: int) -> None:
        before = self.used.get(node, 0)
        self.used[node] = before + gpus
        self.free_gpus -= gpus
        if before == 0 and gpus > 0:
            self.empty[self.rack_of[node]] -= 1

    def stop(self, name: str) -> None:
        """The job `name` finished or was evicted: its nodes are given back."""
        for node, gpus in self.held.pop(name, []):
            after = self.used[node] - gpus
            self.used[node] = after
            self.free_gpus += gpus
            if after == 0 and gpus > 0:
                self.empty[self.rack_of[node]] += 1

    def figures(self, large_waits: Sequence[float]) -> TopologyFigures:
        span = max(self.span, 1e-9)
        enough = self.areas.get("enough", 0.0)
        return TopologyFigures(
            layout=self.layout,
            requests=self.requests,
            required_starts=self.starts.get("required_starts", 0),
            required_within=self.starts.get("required_within", 0),
            preferred_starts=self.starts.get("preferred_starts", 0),
            preferred_within=self.starts.get("preferred_within", 0),
            preferred_within_block=self.starts.get("preferred_within_block", 0),
            large_gangs=len(large_waits),
            wait_p95_large=percentile(large_waits, 95),
            racks_whole_free_mean=self.areas.get("whole", 0.0) / span,
            whole_rack_fits=self.areas.get("full", 0.0) / span,
            gang_nodes=self.gang_nodes,
            gang_fits=self.areas.get("fits", 0.0) / span,
            fragmented=self.areas.get("fragmented", 0.0) / enough if enough else 0.0,
        )
