"""GPU types as resource flavors: typed nodes, one flavor per type, each queue's GPUs split by type.

Rule: derived from the trace's own node list and jobs only; every choice is stated here.

- A node of a known GPU type carries `GPU_TYPE_LABEL` = its type (traces.py: Philly's GPU
  memory per machine, "12GB" or "24GB"; openb's `model` column).
- One ResourceFlavor per type, named `gpu-<type>` (lower case), whose node labels select that
  type's nodes. Flavors are listed in `GpuTypes.order`, by default the type with the most GPUs
  first: a job that may run anywhere takes the plentiful type, and the scarce ones stay free for
  the jobs that name them (each gang tries the flavors in this order; `--flavor-order` puts
  chosen types first).
- A queue's GPU quota (nominal, and borrowing and lending limits when set) is split across the
  flavors in proportion to each type's GPUs in the cluster, rounded down to whole GPUs. Its
  other resources (cpu, memory) stay one pool: a second resource group of the default flavor,
  so a pod's CPU and memory are charged wherever it runs.
- A job naming one GPU model gets a node selector for it, so the flavor assignment skips every
  other flavor and the pods land on that type only. A job accepting any of several models
  (openb's `V100M16|V100M32`) would need node affinity, which the core does not model; instead
  every node and flavor carries, for each such set some job names, the label
  `kohort.dev/gpu-type-in.<A>.<B>` = "true" when its type is one of them, else "false", and the
  job selects "true". A job that names no model, or every type of the cluster, may run on any.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from controller.quota.snapshot import (
    DEFAULT_FLAVOR,
    GPU,
    FlavorQuota,
    FlavorSpec,
    Node,
    QueueSpec,
    Quota,
    ResourceGroup,
)
from controller.simulate.traces import GPU_TYPE_LABEL, GPU_UNIT

ANY_OF_LABEL = "kohort.dev/gpu-type-in."


def flavor_name(gpu_type: str) -> str:
    """The flavor of a GPU type: `gpu-` and the type in lower case, other characters as `-`."""
    return "gpu-" + re.sub(r"[^a-z0-9]+", "-", gpu_type.lower()).strip("-")


def any_of_label(models: Iterable[str]) -> str:
    return ANY_OF_LABEL + ".".join(sorted(set(models)))


def gpu_type_of(node: Node) -> str | None:
    return node.labels.get(GPU_TYPE_LABEL)


@dataclass(frozen=True, slots=True)
class GpuTypes:
    """The cluster's GPU types in flavor order, with their GPUs, and the sets of several models
    that some job accepts (each a label on every node and flavor)."""

    gpus: Mapping[str, int]  # type -> GPUs in the cluster
    order: tuple[str, ...]
    any_of: tuple[frozenset[str], ...] = ()

    @classmethod
    def of(
        cls,
        nodes: Iterable[Node],
        *,
        order: Sequence[str] = (),
        accepted: Iterable[Collection[str]] = (),
    ) -> GpuTypes:
        """The types of `nodes` (labelled by traces.py). `order`: types to try first, in that
        order; the others follow, most GPUs first (a job that may run anywhere takes the
        plentiful type, and a scarce one stays free for the jobs that name it). `accepted`:
        the model sets of the jobs (one per job or per distinct set)."""
        gpus: dict[str, int] = {}
        for node in nodes:
            kind = gpu_type_of(node)
            if kind is not None:
                gpus[kind] = gpus.get(kind, 0) + node.allocatable.get(GPU, 0) // GPU_UNIT
        unknown = [t for t in order if t not in gpus]
        if unknown:
            raise ValueError(f"flavor order names GPU types no node has: {unknown}")
        rest = sorted((t for t in gpus if t not in order), key=lambda t: (-gpus[t], t))
        types = cls(gpus, (*order, *rest))
        sets = {
            frozenset(models)
            for models in accepted
            if len(set(models)) > 1 and types.selector(models)
        }
        return replace(types, any_of=tuple(sorted(sets, key=sorted)))

    def selector(self, models: Collection[str]) -> dict[str, str]:
        """The node selector of a job that accepts `models` (empty: any node)."""
        wanted = set(models)
        if not wanted or wanted >= set(self.gpus):
            return {}
        if len(wanted) == 1:
            return {GPU_TYPE_LABEL: next(iter(wanted))}
        return {any_of_label(wanted): "true"}

    def labels(self, gpu_type: str) -> dict[str, str]:
        """The labels of the nodes (and of the flavor) of one type."""
        labels = {GPU_TYPE_LABEL: gpu_type}
        for models in self.any_of:
            labels[any_of_label(models)] = "true" if gpu_type in models else "false"
        return labels

    def label(self, nodes: Iterable[Node]) -> tuple[Node, ...]:
        """`nodes` with the labels of their type (nodes of no type unchanged)."""
        out = []
        for node in nodes:
            kind = gpu_type_of(node)
            if kind is not None and self.any_of:
                node = replace(node, labels={**node.labels, **self.labels(kind)})
            out.append(node)
        return tuple(out)

    def flavors(self) -> tuple[FlavorSpec, ...]:
        return tuple(FlavorSpec(flavor_name(t), self.labels(t)) for t in self.order)

    def split(self, queue: QueueSpec) -> QueueSpec:
        """`queue` with its GPU quota split across the flavors (see the module's rule)."""
        gpu = queue.quotas.get(GPU)
        total = sum(self.gpus.values())
        if gpu is None or not total:
            return queue

        def part(amount: int | None, gpus: int) -> int | None:
            if amount is None:
                return None
            return amount * gpus // total // GPU_UNIT * GPU_UNIT

        per_type = tuple(
            FlavorQuota(
                flavor_name(t),
                {
                    GPU: Quota(
                        part(gpu.nominal, self.gpus[t]) or 0,
                        part(gpu.borrowing_limit, self.gpus[t]),
                        part(gpu.lending_limit, self.gpus[t]),
                    )
                },
            )
            for t in self.order
        )
        groups = [ResourceGroup((GPU,), per_type)]
        rest = {r: q for r, q in queue.quotas.items() if r != GPU}
        if rest:
            groups.append(ResourceGroup(tuple(sorted(rest)), (FlavorQuota(DEFAULT_FLAVOR, rest),)))
        return replace(queue, groups=tuple(groups))

    def describe(self) -> str:
        """`type (flavor): GPUs`, in flavor order."""
        return ", ".join(f"{t} ({flavor_name(t)}): {self.gpus[t]}" for t in self.order)
