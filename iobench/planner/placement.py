"""Turn a point's ``binding`` and ``placement`` into CPUs, a memory node and numactl flags.

Pure functions over a :class:`~iobench.system.topology.Topology`; nothing here reads
the system. A point that cannot be placed on the machine gets a :class:`Skip`
whose reason is shown to the user as is, so it says what is missing and how to
fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

from iobench.matrix.values import PLACEMENTS, binding_node, parse_binding
from iobench.system.cpulist import format_cpulist
from iobench.system.topology import Core, Node, Topology

__all__ = [
    "SAME_AS",
    "Placement",
    "Skip",
    "coinciding_reason",
    "job_binding",
    "memory_nodes",
    "resolve_placement",
]

#: How the reason of a point skipped as the same placement as another starts: ``same as point 3: …``.
SAME_AS = "same as point "


@dataclass(frozen=True)
class Placement:
    """Where a point's fio process runs.

    Attributes
    ----------
    binding, placement : str
        The canonical binding (``none``, ``local``, ``remote``, ``node:N``) and placement.
    cpu_node, mem_node : int or None
        NUMA node for CPUs and for memory; None for binding ``none``.
    cpus : tuple of int
        CPUs the fio process may use (every online CPU when unbound and unpinned).
    job_cpus : tuple of tuple of int, or None
        For job i, the CPUs it is pinned to; None when jobs are not pinned.
    numactl_args : tuple of str
        Options for ``numactl`` (empty: run fio without numactl).
    """

    binding: str
    placement: str
    cpu_node: int | None
    mem_node: int | None
    cpus: tuple[int, ...]
    job_cpus: tuple[tuple[int, ...], ...] | None
    numactl_args: tuple[str, ...]


@dataclass(frozen=True)
class Skip:
    """A point that cannot be placed on this machine, and why (one or two sentences)."""

    reason: str


def resolve_placement(
    binding: str,
    placement: str,
    numjobs: int,
    home_node: int | None,
    topology: Topology,
    *,
    target: str | None = None,
) -> Placement | Skip:
    """Resolve the binding and placement for one fio process.

    Parameters
    ----------
    binding : str
        ``none``, ``local`` (the target's home node), ``remote`` (the nearest
        other node with CPUs by the distance table, ties to the lowest id) or
        ``node:N``.
    placement : str
        ``node`` (any CPU of the bound node), ``same-core`` (job i on hardware
        thread i of one physical core) or ``diff-cores`` (job i on the first
        thread of the i-th physical core). Unbound, cores are taken from the
        whole machine.
    numjobs : int
        fio's ``numjobs`` for the process (at least 1).
    home_node : int or None
        The target's home NUMA node (see :func:`iobench.system.topology.locate_target`
        or the target's ``home_node:``); None when unknown.
    topology : Topology
        The machine.
    target : str, optional
        The target's path, used only to make skip reasons specific.

    Returns
    -------
    Placement or Skip
        A Skip, with a reason for the user, when the machine cannot host the point.

    Raises
    ------
    ValueError
        When ``binding`` or ``placement`` is not canonical (:mod:`iobench.matrix.values`)
        or ``numjobs`` < 1 — the matrix canonicalizes them when it is loaded.
    """
    if placement not in PLACEMENTS or parse_binding(binding) != binding or numjobs < 1:
        raise ValueError(
            f"binding {binding!r}, placement {placement!r}, numjobs {numjobs} are not canonical values"
        )
    node = _bound_node(binding, home_node, topology, target)
    if isinstance(node, Skip):
        return node
    if placement == "node":
        return _whole_node(binding, node, topology)
    cores = _cores_of(topology, node)
    pinned = (
        _same_core(cores, numjobs, node) if placement == "same-core" else _diff_cores(cores, numjobs, node)
    )
    if isinstance(pinned, Skip):
        return pinned
    cpus = tuple(sorted(cpu for job in pinned for cpu in job))
    args = [f"--physcpubind={format_cpulist(cpus)}"]
    if node is not None:
        args.append(f"--membind={node.id}")
    return Placement(
        binding=binding,
        placement=placement,
        cpu_node=None if node is None else node.id,
        mem_node=None if node is None else node.id,
        cpus=cpus,
        job_cpus=pinned,
        numactl_args=tuple(args),
    )


# --- which node --------------------------------------------------------------


def _bound_node(
    binding: str, home_node: int | None, topology: Topology, target: str | None
) -> Node | None | Skip:
    """The node a binding names; None for ``none``."""
    if binding == "none":
        return None
    explicit = binding_node(binding)
    if explicit is not None:
        return _explicit_node(explicit, topology)
    if binding == "remote" and len(_nodes_with_cpus(topology)) < 2:
        return Skip(_one_node_reason(topology))
    home = _home(home_node, topology, target)
    if isinstance(home, Skip) or binding == "local":
        return home
    return _nearest_other(home, topology)


def _explicit_node(node_id: int, topology: Topology) -> Node | Skip:
    node = topology.node(node_id)
    if node is None:
        return Skip(f"node:{node_id} does not exist (nodes: {_node_ids(topology.nodes)})")
    if not node.cpus:
        return Skip(
            f"node:{node_id} has no online CPUs (a memory-only node); nodes with CPUs: "
            f"{_node_ids(_nodes_with_cpus(topology))}"
        )
    return node


def _home(home_node: int | None, topology: Topology, target: str | None) -> Node | Skip:
    subject = f"target {target}" if target else "the target"
    if home_node is None:
        candidates = _nodes_with_cpus(topology)
        # With one node that has CPUs there is nothing to be remote from: the
        # device is as local as it can get, whatever the kernel reported.
        if len(candidates) == 1 and len(topology.nodes) == 1:
            return candidates[0]
        return Skip(
            f"{subject}: home NUMA node unknown (the kernel reports numa_node -1 or the "
            "target has no block device); set `home_node:` on the target"
        )
    node = topology.node(home_node)
    if node is None:
        return Skip(
            f"{subject}: home node {home_node} does not exist on this machine "
            f"(nodes: {_node_ids(topology.nodes)}); fix `home_node:` on the target"
        )
    if not node.cpus:
        return Skip(
            f"{subject}: home node {home_node} has no online CPUs, so nothing can run local "
            f"to it; use binding node:N with one of {_node_ids(_nodes_with_cpus(topology))}"
        )
    return node


def _nearest_other(home: Node, topology: Topology) -> Node | Skip:
    others = [node for node in _nodes_with_cpus(topology) if node.id != home.id]
    if not others:
        return Skip(_one_node_reason(topology))
    # An unknown distance sorts last, so a readable table always wins; without
    # one the lowest other id is as good a guess as any.
    unknown = 1 << 30

    def key(node: Node) -> tuple[int, int]:
        distance = topology.distance(home.id, node.id)
        return (unknown if distance is None else distance, node.id)

    return min(others, key=key)


def _one_node_reason(topology: Topology) -> str:
    with_cpus = _nodes_with_cpus(topology)
    listed = ", ".join(f"node {node.id}" for node in with_cpus) or "none"
    return f"binding remote needs a second NUMA node with CPUs; this machine has {len(with_cpus)} ({listed})"


def _nodes_with_cpus(topology: Topology) -> list[Node]:
    return [node for node in topology.nodes if node.cpus]


def _node_ids(nodes: tuple[Node, ...] | list[Node]) -> str:
    return ", ".join(str(node.id) for node in nodes) or "none"


# --- which CPUs --------------------------------------------------------------


def _whole_node(binding: str, node: Node | None, topology: Topology) -> Placement:
    if node is None:
        return Placement(
            binding=binding,
            placement="node",
            cpu_node=None,
            mem_node=None,
            cpus=topology.online_cpus(),
            job_cpus=None,
            numactl_args=(),
        )
    return Placement(
        binding=binding,
        placement="node",
        cpu_node=node.id,
        mem_node=node.id,
        cpus=node.cpus,
        job_cpus=None,
        numactl_args=(f"--cpunodebind={node.id}", f"--membind={node.id}"),
    )


def _cores_of(topology: Topology, node: Node | None) -> list[Core]:
    if node is None:
        return list(topology.cores)
    return [core for core in topology.cores if core.node == node.id]


def _where(node: Node | None) -> str:
    return "this machine" if node is None else f"node {node.id}"


def _same_core(cores: list[Core], numjobs: int, node: Node | None) -> tuple[tuple[int, ...], ...] | Skip:
    core = next((core for core in cores if len(core.cpus) >= numjobs), None)
    if core is None:
        widest = max((len(core.cpus) for core in cores), default=0)
        return Skip(
            f"placement same-core with numjobs {numjobs} needs {numjobs} hardware threads "
            f"on one core; cores on {_where(node)} have at most {widest}"
            + (" (no SMT)" if widest == 1 else "")
        )
    return tuple((cpu,) for cpu in core.cpus[:numjobs])


def _diff_cores(cores: list[Core], numjobs: int, node: Node | None) -> tuple[tuple[int, ...], ...] | Skip:
    if numjobs > len(cores):
        return Skip(
            f"placement diff-cores with numjobs {numjobs} needs {numjobs} physical cores; "
            f"{_where(node)} has {len(cores)}"
        )
    return tuple((core.cpus[0],) for core in cores[:numjobs])


def job_binding(placed: Placement) -> dict[str, str]:
    """The placement as fio job options, for a fio that numactl cannot wrap (a host's fio server).

    ``cpus_allowed`` is the bound node's CPUs (pinned jobs get theirs from
    :func:`~iobench.planner.jobfile.render_jobfile`) and ``numa_mem_policy``
    binds memory to the node; fio applies both in each job process, which is
    what numactl's ``--cpunodebind``/``--physcpubind`` and ``--membind`` do for
    the whole process tree here.

    Parameters
    ----------
    placed : Placement
        From :func:`resolve_placement`.

    Returns
    -------
    dict of str to str
        Options for the job file's ``[global]`` section; empty when unbound and unpinned.
    """
    options: dict[str, str] = {}
    if placed.job_cpus is None and placed.cpu_node is not None:
        options["cpus_allowed"] = format_cpulist(placed.cpus)
    if placed.mem_node is not None:
        options["numa_mem_policy"] = f"bind:{placed.mem_node}"
    return options


# --- placements that are the same here ----------------------------------------


def memory_nodes(mem_node: int | None, topology: Topology) -> tuple[int, ...]:
    """The nodes a process's memory may come from: its bound node, else any node of the machine."""
    return (mem_node,) if mem_node is not None else tuple(node.id for node in topology.nodes)


def coinciding_reason(axis: str, first: str, second: str, numjobs: int, topology: Topology) -> str:
    """Why ``axis`` = ``second`` placed a point on the same CPUs and memory as ``first`` on this machine.

    Parameters
    ----------
    axis : str
        ``binding`` or ``placement``.
    first, second : str
        The two values (the point that runs has ``first``).
    numjobs : int
        The point's jobs.
    topology : Topology
        The machine.

    Returns
    -------
    str
        One clause for the user (``one NUMA node (node 0): binding local runs where none does``).
    """
    if axis == "binding":
        nodes = _nodes_with_cpus(topology)
        lead = f"one NUMA node (node {nodes[0].id})" if len(nodes) == 1 else "on this machine"
        return f"{lead}: binding {second} runs on the same CPUs and memory as {first}"
    threads = max((len(core.cpus) for core in topology.cores), default=1)
    if numjobs == 1:
        lead = "one job"
    elif threads == 1:
        lead = "no SMT"
    else:
        lead = "on this machine"
    return f"{lead}: placement {second} pins the jobs to the same CPUs as {first}"
