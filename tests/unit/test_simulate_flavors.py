"""GPU types as flavors in the simulator: typed nodes, one flavor per type, each queue's GPUs
split by type, and jobs that name a GPU model kept to it, under every policy."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from controller.quota import DEFAULT_FLAVOR, FlavorQuota, Node, QueueSpec, Quota, ResourceGroup
from controller.quota.snapshot import GPU
from controller.simulate import main as simulate_main
from controller.simulate.flavors import GpuTypes, any_of_label, flavor_name
from controller.simulate.loop import Result, simulate
from controller.simulate.openb import arrivals, run_curve
from controller.simulate.policies import (
    POLICIES,
    AdmitThenBindPolicy,
    EnginePolicy,
    GangBinder,
    PodBinder,
    Policy,
    make_policy,
)
from controller.simulate.traces import (
    GPU_TYPE_LABEL,
    Job,
    OpenbPod,
    gpu_node,
    load_openb_nodes,
    load_openb_pods,
    philly_nodes,
    philly_queues,
)

# Policies that count quota per flavor; the others have no per-type quota.
FLAVORED = ("quota-drf", "naive-reclaim", "kohort", "kohort-spread")


def typed_nodes(*spec: tuple[str, str]) -> list[Node]:
    """8-GPU nodes, (name, GPU type) each."""
    return [gpu_node(name, 8, kind) for name, kind in spec]


def setup(
    nodes: Sequence[Node], queues: Sequence[QueueSpec], order: Sequence[str]
) -> tuple[GpuTypes, tuple[Node, ...], tuple[QueueSpec, ...]]:
    """The types of `nodes` (jobs naming one model at most), the nodes labelled, the queues
    split by type."""
    types = GpuTypes.of(nodes, order=order)
    return types, types.label(nodes), tuple(types.split(q) for q in queues)


def naming(types: GpuTypes, *models: str) -> tuple[tuple[str, str], ...]:
    return tuple(types.selector(models).items())


def nodes_of(policy: Policy, name: str) -> set[str]:
    """The nodes the pods of `name` were bound to (it must be bound or placed)."""
    binder = getattr(policy, "binder", None)
    if isinstance(binder, PodBinder):
        return {binder.index.names[node] for node, _ in binder.jobs[name].bound}
    if isinstance(binder, GangBinder):
        return {binder.index.names[node] for _, node, _ in binder.plans[name]}
    assert isinstance(policy, EnginePolicy)
    _, running = policy.engine.running[name]
    return {policy.engine.index.names[node] for _, node, _ in running.plan}


def type_of(nodes: Sequence[Node], names: set[str]) -> set[str]:
    return {n.labels[GPU_TYPE_LABEL] for n in nodes if n.name in names}


# -- the flavors -----------------------------------------------------------------------------


def test_types_go_most_gpus_first_unless_an_order_is_given_and_quota_splits_by_gpus() -> None:
    nodes = typed_nodes(("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"))
    assert GpuTypes.of(nodes).order == ("A", "B")
    types = GpuTypes.of(nodes, order=("B",))
    assert types.order == ("B", "A")
    assert [f.name for f in types.flavors()] == ["gpu-b", "gpu-a"]
    assert types.flavors()[0].node_labels == {GPU_TYPE_LABEL: "B"}
    (queue,) = philly_queues({"q": 1}, 18)
    groups = types.split(queue).resource_groups()
    gpu = {f.flavor: f.quotas[GPU].nominal // 1000 for f in groups[0].flavors}
    assert groups[0].resources == (GPU,)
    assert gpu == {"gpu-b": 4, "gpu-a": 13}  # 18 x 8/32 and 18 x 24/32, rounded down
    # CPU and memory stay one pool, on any node.
    assert groups[1].resources == ("cpu", "memory")
    assert [f.flavor for f in groups[1].flavors] == [DEFAULT_FLAVOR]
    with pytest.raises(ValueError, match="no node has"):
        GpuTypes.of(nodes, order=("H100",))


def test_a_job_accepting_several_models_selects_a_label_that_only_their_nodes_say_true() -> None:
    nodes = typed_nodes(("a1", "A"), ("b1", "B"), ("c1", "C"))
    types = GpuTypes.of(nodes, accepted=[("B", "C"), ("A",), ("A", "B", "C")])
    assert types.selector(["A"]) == {GPU_TYPE_LABEL: "A"}
    assert types.selector(["A", "B", "C"]) == {}  # every type: any node
    assert types.selector([]) == {}
    key = any_of_label(["C", "B"])
    assert key == "kohort.dev/gpu-type-in.B.C"
    assert types.selector(["C", "B"]) == {key: "true"}
    labelled = {n.name: n.labels[key] for n in types.label(nodes)}
    assert labelled == {"a1": "false", "b1": "true", "c1": "true"}
    assert {f.name: f.node_labels[key] for f in types.flavors()} == {
        "gpu-a": "false",
        "gpu-b": "true",
        "gpu-c": "true",
    }
    assert flavor_name("V100M16") == "gpu-v100m16"


# -- jobs that name a model ------------------------------------------------------------------


def three_types() -> tuple[list[Node], QueueSpec]:
    """A has the most GPUs, so it is the first flavor, and a1 sorts first: a pod free to go
    anywhere goes there. One queue with quota for all of it."""
    nodes = typed_nodes(
        ("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("b2", "B"), ("c1", "C"), ("c2", "C")
    )
    (queue,) = philly_queues({"q": 1}, 56)
    return nodes, queue


@pytest.mark.parametrize("policy", POLICIES)
def test_every_pod_of_a_job_naming_a_model_runs_on_that_type_only(policy: str) -> None:
    nodes, queue = three_types()
    types = GpuTypes.of(nodes, accepted=[("B", "C")])
    nodes = list(types.label(nodes))
    bound = make_policy(policy, [types.split(queue)], nodes, flavors=types.flavors())
    on_b = Job("on-b", "q", 0.0, 100.0, 2, 4, node_selector=naming(types, "B"))
    bound.submit(on_b, 0.0)
    assert bound.step(0.0).started == ["on-b"]
    assert type_of(nodes, nodes_of(bound, "on-b")) == {"B"}
    b_or_c = Job("b-or-c", "q", 1.0, 100.0, 2, 8, node_selector=naming(types, "B", "C"))
    bound.submit(b_or_c, 1.0)
    assert bound.step(1.0).started == ["b-or-c"]
    kinds = type_of(nodes, nodes_of(bound, "b-or-c"))
    assert kinds <= {"B", "C"}
    if policy in FLAVORED:  # a pod set gets one flavor: all its pods on one type
        assert len(kinds) == 1
    anywhere = Job("anywhere", "q", 2.0, 100.0, 1, 8)
    bound.submit(anywhere, 2.0)
    assert bound.step(2.0).started == ["anywhere"]
    assert type_of(nodes, nodes_of(bound, "anywhere")) == {"A"}


@pytest.mark.parametrize("policy", FLAVORED)
def test_a_gang_accepting_two_models_gets_one_of_them_for_all_its_pods(policy: str) -> None:
    # on-b takes b1; a gang of two 8-GPU pods accepting B or C could take b2 and c1 pod by pod,
    # but a pod set gets one flavor: both its pods go to one type (C: B's quota is short).
    nodes, queue = three_types()
    types = GpuTypes.of(nodes, accepted=[("B", "C")])
    on_b = Job("on-b", "q", 0.0, 100.0, 1, 8, node_selector=naming(types, "B"))
    pair = Job("pair", "q", 1.0, 100.0, 2, 8, node_selector=naming(types, "B", "C"))
    nodes_ = types.label(nodes)
    bound = make_policy(policy, [types.split(queue)], nodes_, flavors=types.flavors())
    bound.submit(on_b, 0.0)
    assert bound.step(0.0).started == ["on-b"]
    bound.submit(pair, 1.0)
    assert bound.step(1.0).started == ["pair"]
    assert type_of(nodes_, nodes_of(bound, "pair")) == {"C"}


# -- quota per type --------------------------------------------------------------------------


def two_types_one_queue(
    flavors: bool,
) -> tuple[list[Job], tuple[Node, ...], tuple[QueueSpec, ...], GpuTypes]:
    """Nodes a1, a2 (type A) and b1, b2 (B); one queue of 16 GPUs: 8 of A and 8 of B."""
    nodes = typed_nodes(("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B"))
    (queue,) = philly_queues({"q": 1}, 16)
    types = GpuTypes.of(nodes, order=("A",))
    jobs = [
        Job("a-first", "q", 0.0, 1000.0, 1, 8, node_selector=naming(types, "A")),
        Job("a-second", "q", 10.0, 100.0, 1, 8, node_selector=naming(types, "A")),
        Job("any", "q", 20.0, 100.0, 1, 8),
    ]
    if not flavors:
        return jobs, tuple(nodes), (queue,), types
    types, labelled, queues = setup(nodes, [queue], ("A",))
    return jobs, labelled, queues, types


def waits(result: Result) -> list[float]:
    assert result.finished == result.jobs
    return result.waits


@pytest.mark.parametrize("policy", FLAVORED)
def test_a_queues_quota_of_one_type_is_not_used_for_another(policy: str) -> None:
    # a-second names A: A's 8 GPUs of quota are a-first's, so it waits for a-first to end
    # (at 1,000 s) although a2 is free and the queue's 8 GPUs of B are not used; "any" takes B.
    jobs, nodes, queues, types = two_types_one_queue(flavors=True)
    bound = make_policy(policy, queues, nodes, flavors=types.flavors())
    result = simulate(jobs, bound, total_gpus=32, weights={"q": 16.0}, progress=None)
    assert waits(result) == [0.0, 990.0, 0.0]
    # With one pool of 16 GPUs, a-second starts at once and "any" waits for it.
    jobs, nodes, queues, _ = two_types_one_queue(flavors=False)
    pooled = simulate(
        jobs, make_policy(policy, queues, nodes), total_gpus=32, weights={"q": 16.0},
        progress=None,
    )  # fmt: skip
    assert waits(pooled) == [0.0, 0.0, 90.0]


@pytest.mark.parametrize("policy", FLAVORED)
def test_a_job_admitted_on_a_flavor_runs_on_its_nodes(policy: str) -> None:
    # A's quota (first in order) goes to "x"; "y" gets B's quota, so its pods go to b1 or b2,
    # though a2 sorts first and is free.
    nodes = typed_nodes(("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B"))
    (queue,) = philly_queues({"q": 1}, 16)
    x, y = Job("x", "q", 0.0, 100.0, 1, 8), Job("y", "q", 0.0, 100.0, 1, 8)
    types, nodes_, queues = setup(nodes, [queue], ("A",))
    bound = make_policy(policy, queues, nodes_, flavors=types.flavors())
    bound.submit(x, 0.0)
    bound.submit(y, 0.0)
    assert sorted(bound.step(0.0).started) == ["x", "y"]
    assert type_of(nodes_, nodes_of(bound, "x")) == {"A"}
    assert type_of(nodes_, nodes_of(bound, "y")) == {"B"}


def test_kueue_like_admission_by_quota_can_give_a_flavor_whose_nodes_never_host_the_pods() -> None:
    # quota-drf has no placement check: an 8-GPU pod admitted on the flavor of the 2-GPU nodes
    # (first in order, with quota for it) is never bound; kohort skips that flavor and runs it.
    nodes = [gpu_node("small-1", 2, "12GB"), gpu_node("big-1", 8, "24GB")]
    types = GpuTypes.of(nodes, order=("12GB",))
    per_flavor = tuple(FlavorQuota(f.name, {GPU: Quota(8000)}) for f in types.flavors())
    (pooled,) = philly_queues({"q": 1}, 10)
    rest = {r: q for r, q in pooled.quotas.items() if r != GPU}
    queue = replace(
        pooled,
        groups=(
            ResourceGroup((GPU,), per_flavor),
            ResourceGroup(tuple(sorted(rest)), (FlavorQuota(DEFAULT_FLAVOR, rest),)),
        ),
    )
    big = Job("big", "q", 0.0, 100.0, 1, 8)
    drf = make_policy("quota-drf", [queue], nodes, flavors=types.flavors())
    assert isinstance(drf, AdmitThenBindPolicy)
    drf.submit(big, 0.0)
    assert drf.step(0.0).started == []
    assert drf.engine.running["big"][1].flavors == {"main": {GPU: "gpu-12gb"}}
    kohort = make_policy("kohort", [queue], nodes, flavors=types.flavors())
    kohort.submit(big, 0.0)
    assert kohort.step(0.0).started == ["big"]
    assert nodes_of(kohort, "big") == {"big-1"}


# -- the default is one pool -----------------------------------------------------------------


def random_trace(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    t = 0.0
    for k in range(40):
        t += rng.expovariate(1 / 30)
        gpus = rng.choice((1, 1, 1, 2, 4, 8, 16))
        pods = max(1, gpus // 8)
        jobs.append(
            Job(f"j{k:02d}", rng.choice("abc"), t, rng.uniform(50, 600), pods, gpus // pods)
        )
    return jobs


@pytest.mark.parametrize("policy", POLICIES)
def test_one_gpu_type_as_a_flavor_decides_exactly_as_one_pool(policy: str) -> None:
    nodes = [gpu_node(f"n{i}", 8) for i in range(4)]
    queues = philly_queues({"a": 2, "b": 1, "c": 1}, 32)
    weights = {q.name: q.quotas[GPU].nominal / 1000 for q in queues}
    jobs = random_trace(7)
    pooled = simulate(
        jobs, make_policy(policy, queues, nodes), total_gpus=32, weights=weights, progress=None
    )
    typed = [gpu_node(f"n{i}", 8, "24GB") for i in range(4)]
    types = GpuTypes.of(typed)
    one = simulate(
        jobs,
        make_policy(policy, [types.split(q) for q in queues], typed, flavors=types.flavors()),
        total_gpus=32,
        weights=weights,
        progress=None,
    )
    assert one.waits == pooled.waits
    assert (one.evictions, one.partial_jobs) == (pooled.evictions, pooled.partial_jobs)


def test_by_default_nodes_are_untyped_jobs_name_nothing_and_queues_have_one_pool(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "philly"
    folder.mkdir()
    (folder / "philly_vc.csv").write_text("vc,node num\na,1\nb,1\n")
    (folder / "cluster_machine_list").write_text(
        "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,8, 24GB\nm2,8, 24GB\n"
    )
    assert all(not n.labels for n in philly_nodes(tmp_path, mixed=True))
    assert {
        n.name: n.labels[GPU_TYPE_LABEL] for n in philly_nodes(tmp_path, mixed=True, typed=True)
    } == {
        "m0": "12GB",
        "m1": "24GB",
        "m2": "24GB",
    }
    assert all(not n.labels for n in philly_nodes(tmp_path, mixed=False))
    parser = argparse.ArgumentParser()
    simulate_main.add_arguments(parser)
    assert parser.parse_args(["philly"]).flavors is False
    assert parser.parse_args(["openb"]).flavors is False


def test_kohort_simulate_philly_flavors_reports_the_types_in_their_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "philly"
    folder.mkdir()
    (folder / "philly_vc.csv").write_text("vc,node num\na,1\nb,1\n")
    (folder / "cluster_machine_list").write_text(
        "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,8, 24GB\nm2,8, 24GB\n"
    )
    (folder / "philly.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:00:00,500.0,8,4000.0,a\n"
        "2017-10-09 07:00:01,100.0,1,100.0,b\n"
        "2017-10-09 07:00:02,100.0,2,200.0,b\n"
    )
    parser = argparse.ArgumentParser()
    simulate_main.add_arguments(parser)
    expected = {
        ("--no-flavors",): "one pool",
        ("--flavors",): "24GB (gpu-24gb): 16, 12GB (gpu-12gb): 2",  # most GPUs first
        ("--flavors", "--flavor-order", "12GB"): "12GB (gpu-12gb): 2, 24GB (gpu-24gb): 16",
    }
    for flags, types in expected.items():
        args = parser.parse_args(
            ["--traces", str(tmp_path), "--json", "--quiet", "philly", "--nodes", "mixed",
             "--policies", "quota-drf,kohort", *flags]
        )  # fmt: skip
        assert simulate_main.run(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert [r["finished"] for r in out["results"]] == [3, 3]
        assert out["setup"]["gpu_types"] == types


# -- openb -----------------------------------------------------------------------------------


def test_openb_pods_read_their_models_and_nodes_their_type(tmp_path: Path) -> None:
    folder = tmp_path / "openb"
    folder.mkdir()
    (folder / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,96000,786432,8,V100M32\n"
    )
    (folder / "openb_pod_list_gpuspec.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,1024,1,1000,V100M16|V100M32|V100M32,LS,Running,0,10,0\n"
        "p1,1000,1024,1,500,,LS,Running,1,10,1\n"
        "p2,1000,1024,0,0,T4,LS,Running,2,10,2\n"
    )
    pods = load_openb_pods(tmp_path, variant="gpuspec")
    assert [p.models for p in pods] == [("V100M16", "V100M32"), (), ()]  # a CPU pod names none
    assert [n.labels for n in load_openb_nodes(tmp_path)] == [{}, {}]
    typed = load_openb_nodes(tmp_path, typed=True)
    assert [n.labels[GPU_TYPE_LABEL] for n in typed] == ["T4", "V100M32"]


def test_openb_copies_keep_their_models() -> None:
    pods = [OpenbPod("p", 1000, 1000, 1, False, ("T4",))]
    assert {p.models for p in arrivals(pods, 10, 1.0, 42)} == {("T4",)}


@pytest.mark.parametrize("policy", ["kohort", "kube-default", "first-fit"])
def test_an_openb_pod_naming_a_full_type_is_dropped_though_another_has_room(policy: str) -> None:
    nodes = [
        Node("a1", {GPU: 2000, "cpu": 8000, "memory": 8000}, {GPU_TYPE_LABEL: "A"}),
        Node("b1", {GPU: 2000, "cpu": 8000, "memory": 8000}, {GPU_TYPE_LABEL: "B"}),
    ]
    pods = [OpenbPod(f"p{i}", 1000, 1000, 1, False, ("A",)) for i in range(3)]
    types = GpuTypes.of(nodes)
    curve = run_curve(types.label(nodes), pods, policy, 0.5, 42, types)
    assert curve.dropped == 1
    assert curve.allocated[-1] == pytest.approx(50.0)
    # Without GPU types the models are ignored: all three fit.
    pooled = [Node(n.name, n.allocatable) for n in nodes]
    assert run_curve(pooled, pods, policy, 0.5, 42).dropped == 0
