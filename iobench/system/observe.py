"""What /proc shows about a running fio: the CPUs and memory policy each process really has.

Placement is verified, not assumed: the runner polls fio's process
group while it runs and :func:`check_placement` compares what it saw with the plan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from iobench.errors import TopologyError
from iobench.system import procfs
from iobench.system.cpulist import format_cpulist, parse_cpulist
from iobench.system.hostfs import SystemRoot
from iobench.system.process import descendants

NUMA_MAPS_HEAD = 4096


@dataclass(frozen=True)
class Observed:
    """One process of fio's group, as /proc showed it."""

    pid: int
    comm: str
    leader: bool
    cpus: tuple[int, ...]
    mems: str | None
    policy: str | None


def memory_policy(pid: int, proc: str = "/proc") -> str | None:
    """The NUMA policies of the process's first mappings (``bind:1``, ``default``…), comma-joined.

    Only the first :data:`NUMA_MAPS_HEAD` bytes of numa_maps are read, so a
    poll stays cheap however much fio has mapped (see
    :meth:`~iobench.system.hostfs.SystemRoot.memory_policies`).
    """
    policies = procfs.memory_policies(SystemRoot(procfs=proc), pid, NUMA_MAPS_HEAD)
    return ",".join(policies or ()) or None


def _observe(pids: list[int], root: int, system: SystemRoot, *, policies: bool) -> list[Observed]:
    found = []
    for pid in pids:
        info = procfs.process_status(system, pid)
        if info is None:
            continue
        try:
            cpus = parse_cpulist(info.get("Cpus_allowed_list", ""))
        except TopologyError:
            continue
        found.append(
            Observed(
                pid=pid,
                comm=info.get("Name", ""),
                leader=pid == root,
                cpus=cpus,
                mems=info.get("Mems_allowed_list") or None,
                policy=memory_policy(pid, os.fspath(system.procfs)) if policies else None,
            )
        )
    return found


class GroupWatcher:
    """Polled while fio runs; keeps the last view of each fio process it saw.

    Each poll reads every process's status, then the memory policy of one
    process not yet read, workers first: on a loaded or emulated machine a
    poll that lingers over the leader can outlast a worker's whole life.
    """

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.system = SystemRoot(procfs=proc)
        self.seen: dict[int, Observed] = {}

    def __call__(self, root: int) -> list[int]:
        """Look at ``root`` (the process iobench started) and its descendants once; return their pids."""
        pids = descendants(root, self.proc)
        alive = []
        for item in _observe(pids, root, self.system, policies=False):
            if not item.comm.startswith("fio"):
                continue
            previous = self.seen.get(item.pid)
            if previous is not None:
                item = replace(item, policy=previous.policy)
            self.seen[item.pid] = item
            alive.append(item)
        unwalked = sorted((o for o in alive if o.policy is None), key=lambda o: (o.leader, o.pid))
        if unwalked:
            first = unwalked[0]
            self.seen[first.pid] = replace(first, policy=memory_policy(first.pid, self.proc))
        return pids

    def workers(self) -> list[Observed]:
        """fio's job processes in fork order (the group leader is fio's parent process)."""
        return sorted((o for o in self.seen.values() if not o.leader), key=lambda o: o.pid)

    def cpus(self) -> str | None:
        """Union of the CPUs any fio process was allowed, as a cpulist; None if none was seen."""
        if not self.seen:
            return None
        return format_cpulist(tuple(sorted({c for item in self.seen.values() for c in item.cpus})))

    def to_json(self) -> list[dict[str, object]]:
        """The per-process observations, in pid order."""
        return [
            {
                "pid": o.pid,
                "comm": o.comm,
                "leader": o.leader,
                "cpus": format_cpulist(o.cpus),
                "mems": o.mems,
                "policy": o.policy,
            }
            for o in sorted(self.seen.values(), key=lambda o: o.pid)
        ]


def check_placement(
    watcher: GroupWatcher,
    *,
    cpus: Sequence[int],
    job_cpus: Sequence[Sequence[int]] | None,
    mem_node: int | None,
) -> str | None:
    """Why what /proc showed contradicts the plan, or None when it agrees (or nothing was seen).

    Every fio process must be confined to the planned CPUs; with pinned jobs, each
    planned job CPU set must belong to one worker; with a memory node, the policy
    must bind to it.
    """
    if not watcher.seen:
        return None
    allowed = set(cpus)
    for item in watcher.seen.values():
        if not set(item.cpus) <= allowed:
            return (
                f"fio process {item.pid} was allowed CPUs {format_cpulist(item.cpus)}, "
                f"outside the planned {format_cpulist(tuple(cpus))}"
            )
    workers = watcher.workers()
    if job_cpus is not None and workers:
        seen_sets = [set(w.cpus) for w in workers]
        for index, planned in enumerate(job_cpus[: len(workers)]):
            if set(planned) not in seen_sets:
                return (
                    f"job {index} should run on CPUs {format_cpulist(tuple(planned))}; the workers had "
                    + ", ".join(format_cpulist(w.cpus) for w in workers)
                )
    if mem_node is not None:
        policies = [o.policy for o in watcher.seen.values() if o.policy]
        wrong = [p for p in policies if f"bind:{mem_node}" not in p]
        if wrong:
            return f"memory should be bound to node {mem_node}; /proc showed policy {wrong[0]}"
    return None
