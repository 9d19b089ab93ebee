"""Plans for hosts (SPEC §11): each host's part of a point placed against that host's topology.

A point runs on one host (the ``host`` axis) or on every host at once; it is
one ``fio --client=H1 job-H1.fio --client=H2 job-H2.fio`` command here, each
host's job file made as for this machine (:class:`~iobench.planner.plans._Planner`)
from the host's own topology and targets, with the binding written into the
job file (:func:`~iobench.planner.placement.job_binding`) because fio's server,
not numactl, starts the jobs there. A point some host cannot place is skipped,
naming the host: a point's numbers are those of all its hosts together.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from iobench.errors import TopologyError, TuningError
from iobench.matrix.expand import Combo
from iobench.matrix.hosts import Host as MatrixHost
from iobench.matrix.model import Matrix, Target, point_writes
from iobench.planner.plans import Plan, PlannedRun, _ordered, _Planner, check_opened, refuse_unsafe
from iobench.system.cpulist import format_cpulist
from iobench.system.hosts import Connector, Fleet, Host, HostSpec, RemoteMachine, ssh_connector
from iobench.system.remote import RemoteRoot
from iobench.system.safety import foreign_files, root_disks
from iobench.system.ssh import SshTarget
from iobench.system.tuning import validate

__all__ = ["client_argv", "describe_hosts", "host_specs", "host_targets", "plan_on_fleet", "plan_remote"]


def host_targets(matrix: Matrix, host: MatrixHost) -> tuple[Target, ...]:
    """The host's own targets, else the matrix's."""
    return host.targets if host.targets is not None else matrix.targets


def _combos_on(matrix: Matrix, host: MatrixHost) -> list[Combo]:
    return [c for c in matrix.combos if "host" not in c or c["host"] == host.name]


def host_specs(matrix: Matrix) -> list[HostSpec]:
    """What the system layer needs of each of the matrix's hosts, in order."""
    specs = []
    for host in matrix.hosts:
        combos = _combos_on(matrix, host)
        specs.append(
            HostSpec(
                target=SshTarget(host.ssh, host.ssh_options, host.name or ""),
                targets=host_targets(matrix, host),
                writes=any(point_writes(matrix, c) for c in combos),
                server=host.server,
                needs_numa=any(str(c.get("binding", "none")) != "none" for c in combos),
            )
        )
    return specs


def client_argv(
    fio_binary: str,
    processes: Sequence[Any],
    clients: Mapping[str, str] | None = None,
    output: str = "fio.json",
) -> list[str]:
    """The point's one fio client command from its hosts' processes.

    Parameters
    ----------
    fio_binary
        This machine's fio.
    processes
        The point's :class:`~iobench.planner.plans.FioProcess` objects (each with a ``host``).
    clients
        Host name → what ``--client=`` takes (``127.0.0.1,<port>`` through the
        forward); None keeps the host names (what ``plan`` shows).
    output
        The JSON output file.
    """
    argv = [fio_binary, "--output-format=json+", f"--output={output}"]
    for process in processes:
        part = list(process.argv)
        if clients is not None:
            part[0] = f"--client={clients[process.host]}"
        argv += part
    return argv


def _merge(index: int, combo: Combo, per_host: dict[str, list[PlannedRun]]) -> list[PlannedRun]:
    """One run per repeat from each host's runs of the point."""
    merged = []
    for parts in zip(*per_host.values(), strict=True):
        skipped = [(name, p) for name, p in zip(per_host, parts, strict=True) if p.status == "skipped"]
        reason = "; ".join(f"host {name}: {p.reason}" for name, p in skipped) or None
        settings = {
            f"{name}:{disk}": values
            for name, p in zip(per_host, parts, strict=True)
            for disk, values in p.settings.items()
        }
        expected = [p.expected_s for p in parts]
        merged.append(
            PlannedRun(
                point=index,
                repeat=parts[0].repeat,
                params=combo,
                status="skipped" if skipped else "run",
                reason=reason,
                processes=() if skipped else tuple(proc for p in parts for proc in p.processes),
                settings=settings,
                writes=any(p.writes for p in parts),
                timeout_s=max(p.timeout_s for p in parts),
                expected_s=None
                if any(e is None for e in expected)
                else max(e for e in expected if e is not None),
                runtime_s=parts[0].runtime_s,
            )
        )
    return merged


def _check_host_settings(
    host: Host, planner: _Planner, points: list[list[PlannedRun]], drop_caches: bool
) -> list[str]:
    """The device-setting rules of :func:`~iobench.planner.plans.plan`, checked on the host itself."""
    assert host.facts is not None
    name = host.facts.name
    prefix = f"{host.describe()}: "
    problems = {prefix + p for p in planner.problems}
    distinct: dict[str, dict[str, set[Any]]] = {}
    for point in points:
        for key, wanted in point[0].settings.items():
            owner, _, disk = key.partition(":")
            if owner != name:
                continue
            for setting, value in wanted.items():
                distinct.setdefault(disk, {}).setdefault(setting, set()).add(value)
    remote = RemoteRoot(host.connection, snapshot=host.facts.snapshot.root)
    for disk, names in distinct.items():
        for setting, choices in names.items():
            for value in sorted(choices, key=str):
                problems.update(prefix + p for p in validate({disk: {setting: value}}, system=remote))
    if distinct:
        machine = RemoteMachine(host, host.facts.snapshot)
        for disk in sorted(root_disks(host.facts.snapshot.system, machine) & set(distinct)):
            problems.add(
                f"{prefix}disk {disk} holds / (the system disk): iobench does not change its "
                f"{' or '.join(sorted(distinct[disk]))}; put the target on another disk"
            )
    if drop_caches and not remote.writable("proc/sys/vm/drop_caches"):
        problems.add(f"{prefix}drop_caches: true needs root there (it writes /proc/sys/vm/drop_caches)")
    return sorted(problems)


def plan_on_fleet(matrix: Matrix, fleet: Fleet, *, seed: int | None = None) -> Plan:
    """Plan every point × repeat of ``matrix`` on hosts that passed :meth:`Fleet.preflight`.

    Parameters
    ----------
    matrix
        A matrix with ``hosts:``.
    fleet
        Its hosts, preflighted (each host's facts known), in matrix order.
    seed
        The shuffle seed for ``order: shuffled`` (see :func:`~iobench.planner.plans.plan`).

    Raises
    ------
    TopologyError
        A target's ``home_node`` is not a node of its host, or no point can be
        placed on the hosts.
    TuningError
        A device setting some host cannot take (checked on the host).
    """
    hosts: dict[str, tuple[MatrixHost, Host]] = {}
    for spec, host in zip(matrix.hosts, fleet.hosts, strict=True):
        assert host.facts is not None
        hosts[host.facts.name] = (spec, host)
        for target in host_targets(matrix, spec):
            topology = host.facts.topology
            if target.home_node is not None and topology.node(target.home_node) is None:
                nodes = ", ".join(str(n.id) for n in topology.nodes)
                raise TopologyError(
                    f"{matrix.source}: {host.describe()}: target {target.path}: home_node {target.home_node} "
                    f"is not a NUMA node there (nodes: {nodes})"
                )
    planners = {}
    for name, (spec, host) in hosts.items():
        assert host.facts is not None
        targets = host_targets(matrix, spec)
        machine = RemoteMachine(host, host.facts.snapshot)
        planners[name] = _Planner(
            dataclasses.replace(matrix, targets=targets),
            host.facts.topology,
            host.facts.locations,
            str(host.facts.snapshot.root),
            host=name,
            foreign=foreign_files(targets, host.facts.locations, machine),
        )
    by_configured = {spec.name: name for name, (spec, _) in hosts.items() if spec.name}
    points = []
    for index, combo in enumerate(matrix.combos, start=1):
        chosen = [by_configured[str(combo["host"])]] if "host" in combo else list(hosts)
        points.append(_merge(index, combo, {name: planners[name].point(index, combo) for name in chosen}))
    for planner in planners.values():
        refuse_unsafe(planner)
    check_opened(matrix, points, [t for spec in matrix.hosts for t in host_targets(matrix, spec)])
    problems: list[str] = []

    def check(host: Host) -> None:
        assert host.facts is not None
        problems.extend(_check_host_settings(host, planners[host.facts.name], points, matrix.drop_caches))

    fleet.each(check, [host for _, host in hosts.values()])
    if problems:
        raise TuningError(
            "device settings refused, nothing was run:\n" + "\n".join(f"  {p}" for p in problems)
        )
    if points and all(p[0].status == "skipped" for p in points):
        reasons = sorted({p[0].reason or "" for p in points})
        raise TopologyError(
            f"{matrix.source}: every point is skipped on these hosts:\n"
            + "\n".join(f"  {r}" for r in reasons)
        )
    if matrix.order == "shuffled":
        seed = (
            seed if seed is not None else matrix.seed if matrix.seed is not None else secrets.randbelow(2**31)
        )
    else:
        seed = None
    first = fleet.hosts[0].facts
    assert first is not None
    facts = tuple(h.facts for h in fleet.hosts if h.facts is not None)
    return Plan(
        matrix, tuple(_ordered(points, matrix.order, seed)), seed, "", first.topology, {}, hosts=facts
    )


def plan_remote(
    matrix: Matrix,
    *,
    seed: int | None = None,
    allow_write: Sequence[str] = (),
    connector: Connector = ssh_connector,
) -> Plan:
    """Connect to the matrix's hosts, check them, plan, and disconnect (what ``iobench plan`` does).

    Reads the hosts and changes nothing on them: no fio server is started.

    Raises
    ------
    HostsRefused
        When a host is unreachable or fails a check (naming it and the fix).
    """
    with Fleet(
        host_specs(matrix), fio_version=matrix.fio_version, allow_write=allow_write, connector=connector
    ) as fleet:
        fleet.preflight()
        return plan_on_fleet(matrix, fleet, seed=seed)


def describe_hosts(plan: Plan) -> list[str]:
    """One line per host and per target on it, for ``iobench plan``: who it is and where its targets are."""
    lines = []
    for spec, facts in zip(plan.matrix.hosts, plan.hosts, strict=True):
        nodes = ", ".join(f"node {n.id}: cpus {format_cpulist(n.cpus) or '-'}" for n in facts.topology.nodes)
        lines.append(
            f"host {facts.name} ({facts.spec.target.destination}): hostname {facts.hostname or '?'}, "
            f"{facts.fio_version}, kernel {facts.kernel or '?'}; {nodes}"
        )
        for target in host_targets(plan.matrix, spec):
            location = facts.locations[target.path]
            home = location.home_node if location.home_node is not None else target.home_node
            lines.append(
                f"  target {target.path}: {location.kind}, disks {', '.join(location.disks) or '-'}, "
                f"home node {home if home is not None else 'unknown'}"
            )
    return lines
