"""A matrix becomes a plan: every point × repeat with its placement, job files and argv.

Planning reads the machine (sysfs) and the targets but changes nothing; ``run``
executes exactly what ``plan`` returns.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from iobench.errors import SafetyError, TopologyError, TuningError
from iobench.matrix.expand import Combo
from iobench.matrix.fiocatalog import fio_catalog
from iobench.matrix.hosts import Host as MatrixHost
from iobench.matrix.model import Matrix, point_writes
from iobench.matrix.targets import Target
from iobench.matrix.values import IOBENCH_AXES, Duration, Value, fio_text
from iobench.planner.jobfile import opened_problems, render_jobfile
from iobench.planner.placement import (
    SAME_AS,
    Placement,
    Skip,
    coinciding_reason,
    job_binding,
    memory_nodes,
    resolve_placement,
)
from iobench.planner.timelogs import host_log_options
from iobench.system.cpulist import format_cpulist
from iobench.system.fleet import Fleet, HostFacts, HostSpec
from iobench.system.hostfs import SystemRoot
from iobench.system.pcie import PcieFinding, sweep_findings
from iobench.system.remote import RemoteRoot
from iobench.system.remoteguard import RemoteMachine
from iobench.system.safety import check_targets, foreign_files, root_disks
from iobench.system.ssh import SshTarget
from iobench.system.topology import TargetLocation, Topology, discover_topology, locate_target
from iobench.system.tuning import QUEUE_SETTINGS as SETTINGS
from iobench.system.tuning import validate
from iobench.version import __version__

DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class FioProcess:
    """One fio process of a point (one per point, or one per target with ``launch: per-target``)."""

    argv: tuple[str, ...]
    jobfile_name: str
    jobfile: str
    output: str
    targets: tuple[str, ...]
    sections: tuple[str, ...]
    cpu_node: int | None
    mem_node: int | None
    target_node: int | None
    cpus: tuple[int, ...]
    job_cpus: tuple[tuple[int, ...], ...] | None
    workers: int = 0
    """The job processes fio forks (``numjobs`` per section); 0 when its jobs are threads (``thread``)."""
    host: str | None = None
    """The host whose fio server runs it (``hosts:``); None: this machine. Its ``argv`` is then
    this host's part of the point's one ``fio --client`` command (:func:`client_argv`)."""

    def to_json(self) -> dict[str, Any]:
        """One entry of ``processes[]`` in ``plan --json``."""
        return {
            **({"host": self.host} if self.host is not None else {}),
            "argv": list(self.argv),
            "jobfile": self.jobfile,
            "jobfile_name": self.jobfile_name,
            "output": self.output,
            "targets": list(self.targets),
            "cpu_node": self.cpu_node,
            "mem_node": self.mem_node,
            "target_node": self.target_node,
            "cpus": format_cpulist(self.cpus),
            "job_cpus": None if self.job_cpus is None else [format_cpulist(c) for c in self.job_cpus],
        }


@dataclass(frozen=True)
class PlannedRun:
    """One point × repeat: what runs, or why it is skipped."""

    point: int
    repeat: int
    params: Combo
    status: Literal["run", "skipped"]
    reason: str | None
    processes: tuple[FioProcess, ...]
    settings: dict[str, dict[str, Any]]
    writes: bool
    timeout_s: float
    expected_s: float | None
    runtime_s: float | None
    same_as: int | None = None
    """Skipped because it would run exactly as this point does here (same CPUs, memory, everything else)."""

    @property
    def key(self) -> str:
        """The run directory name of this point × repeat (``0003-r2``)."""
        return f"{self.point:04d}-r{self.repeat}"

    def to_json(self) -> dict[str, Any]:
        """One run of ``plan --json``."""
        return {
            "point": self.point,
            "repeat": self.repeat,
            "key": self.key,
            "params": dict(self.params),
            "status": self.status,
            "reason": self.reason,
            **({"same_as": self.same_as} if self.same_as is not None else {}),
            "settings": self.settings,
            "writes": self.writes,
            "timeout_s": self.timeout_s,
            "processes": [p.to_json() for p in self.processes],
        }


@dataclass(frozen=True)
class SiteFacts:
    """A machine the points are planned on: this one, or a host of the matrix.

    Attributes
    ----------
    host : str or None
        The frame's ``host`` (its configured name, else its hostname); None for this machine.
    label : str
        Put before what is said about it (``host a (root@storage-a): ``); empty here.
    targets : tuple of Target
        Its targets (a host's own, else the matrix's).
    topology : Topology
        Read from its sysfs (this machine's, a ``--fsroot`` snapshot, a host's snapshot).
    locations : dict of str to TargetLocation
        Each target as located there.
    fsroot : str
        The root its sysfs was read from (``/`` for this machine when live).
    system : SystemRoot
        Its sysfs as device settings are checked against (live where it can be).
    system_disks : frozenset of str
        Disks under its ``/``, whose settings iobench never changes.
    drop_caches : bool or None
        Whether this user may drop its page cache; None when not asked (a snapshot).
    foreign : frozenset of str
        Its file targets iobench may not write (they exist, it did not create them, no ``--allow-write``).
    """

    host: str | None
    label: str
    targets: tuple[Target, ...]
    topology: Topology = field(repr=False)
    locations: dict[str, TargetLocation] = field(repr=False)
    fsroot: str
    system: SystemRoot = field(repr=False)
    system_disks: frozenset[str] = frozenset()
    drop_caches: bool | None = None
    foreign: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Plan:
    """Everything a run will do, in the order it will do it.

    ``warnings`` are what the plan does not refuse but the user should know:
    a target disk whose PCIe link is degraded or limited, several target
    disks under one PCIe root port (docs/pcie.md).
    """

    matrix: Matrix
    runs: tuple[PlannedRun, ...]
    seed: int | None
    fsroot: str
    topology: Topology = field(repr=False)
    locations: dict[str, TargetLocation] = field(repr=False)
    warnings: tuple[PcieFinding, ...] = ()
    hosts: tuple[HostFacts, ...] = field(default=(), repr=False)
    """Each host's facts from the preflight (``hosts:``); empty for this machine."""
    sites: tuple[SiteFacts, ...] = field(default=(), repr=False)
    """The machines the points run on: this one, or each host, in matrix order."""

    def site(self, host: str | None) -> SiteFacts:
        """The site a process runs on (its ``host``; None: this machine)."""
        for site in self.sites:
            if site.host == host:
                return site
        raise KeyError(host)

    def to_json(self) -> list[dict[str, Any]]:
        """``plan --json``: one object per point × repeat."""
        return [run.to_json() for run in self.runs]

    def target_facts(self) -> list[dict[str, Any]]:
        """Each target as located on this machine, with its disks' facts (saved in the manifest)."""
        return [
            target_facts(target, self.locations[target.path], self.topology) for target in self.matrix.targets
        ]

    @property
    def expected_s(self) -> float | None:
        """Seconds of fio runtime the runnable points ask for, when every one says."""
        times = [r.expected_s for r in self.runs if r.status == "run"]
        if any(t is None for t in times):
            return None
        return sum(t for t in times if t is not None)


def _seconds(value: Value | None) -> float | None:
    return float(value) if isinstance(value, Duration) else None


def _runtime_seconds(matrix: Matrix, combo: Combo) -> float | None:
    """The measured time fio is asked for (``runtime``, when time-based), without ramp."""
    if not matrix.setting(combo, "time_based"):
        return None
    return _seconds(matrix.setting(combo, "runtime"))


def _expected_seconds(matrix: Matrix, combo: Combo) -> float | None:
    runtime = _seconds(matrix.setting(combo, "runtime"))
    if runtime is None:
        return None
    return runtime + (_seconds(matrix.setting(combo, "ramp_time")) or 0.0)


def _timeout(matrix: Matrix, expected: float | None) -> float:
    if matrix.timeout_s is not None:
        return matrix.timeout_s
    if expected is None:
        return DEFAULT_TIMEOUT_S
    return expected + max(30.0, 0.5 * expected)


def _global_options(matrix: Matrix, combo: Combo) -> dict[str, str]:
    options = {name: fio_text(value) for name, value in matrix.fio.items()}
    for name, value in combo.items():
        if name not in IOBENCH_AXES:
            options[name] = fio_text(value)
    return options


def _tool(name: str, fsroot: str) -> str:
    found = shutil.which(name)
    if found is None and fsroot == "/" and name == "numactl":
        raise TopologyError(
            "numactl not found, but the matrix binds fio to a node; install it with `apt-get install numactl`"
        )
    return found or name


@dataclass
class _Planner:
    matrix: Matrix
    topology: Topology
    locations: dict[str, TargetLocation]
    fsroot: str
    problems: set[str] = field(default_factory=set)
    host: str | None = None
    foreign: frozenset[str] = frozenset()
    """Targets that are files iobench may not write: they exist, it did not create them, no ``--allow-write``."""
    refused: set[str] = field(default_factory=set)
    """Why points cannot run safely as planned (a :class:`SafetyError`)."""

    def home(self, target: Target) -> int | None:
        found = self.locations[target.path].home_node
        return found if found is not None else target.home_node

    def process(
        self,
        combo: Combo,
        point: int,
        targets: tuple[Target, ...],
        placed: Placement,
        writes: bool,
        name: str,
    ) -> FioProcess:
        suffix = "" if name == "" else f"-{name}"
        if self.host is not None:
            suffix = f"-{self.host}{suffix}"
        jobfile_name, output = f"job{suffix}.fio", f"fio{suffix}.json"
        options = _global_options(self.matrix, combo)
        if self.host is not None:
            # fio's server runs the jobs: the binding goes into the job file, not under numactl.
            options.update(job_binding(placed))
            # Its logs in Unix time: when each host ran (fio 3.33's client output does not say).
            options.update(host_log_options())
        jobfile = render_jobfile(
            title=f"iobench {__version__}: {self.matrix.name} point {point}",
            params={k: fio_text(v) for k, v in combo.items()},
            options=options,
            targets=targets,
            job_cpus=placed.job_cpus,
        )
        readonly = ["--readonly"] if not writes and self.read_only(targets) else []
        argv: list[str] = []
        if self.host is not None:
            # This host's part of the point's one `fio --client=H1 a.fio --client=H2 b.fio` command.
            argv, output = [f"--client={self.host}", *readonly, jobfile_name], "fio.json"
        else:
            if placed.numactl_args:
                argv += [_tool("numactl", self.fsroot), *placed.numactl_args, "--"]
            argv += [self.matrix.fio_binary, "--output-format=json+", f"--output={output}", *readonly]
            argv.append(jobfile_name)
        homes = {self.home(t) for t in targets}
        return FioProcess(
            argv=tuple(argv),
            jobfile_name=jobfile_name,
            jobfile=jobfile,
            output=output,
            targets=tuple(t.path for t in targets),
            sections=tuple(t.section for t in targets),
            cpu_node=placed.cpu_node,
            mem_node=placed.mem_node,
            target_node=homes.pop() if len(homes) == 1 else None,
            cpus=placed.cpus,
            job_cpus=placed.job_cpus,
            workers=0 if options.get("thread", "0") != "0" else len(targets) * self.numjobs(combo),
            host=self.host,
        )

    def read_only(self, targets: tuple[Target, ...]) -> bool:
        """Whether a read point's fio process runs with ``--readonly``: all its targets are block devices or foreign files.

        A foreign file (one that exists, that iobench did not create and that
        that ``--allow-write`` does not name) must not be laid out or extended, which fio
        does on reads too when ``size``, ``offset`` or ``filesize`` reach past
        its end; with ``--readonly`` fio refuses to. A process that also holds
        a file fio may have to lay out cannot run read-only: that is refused.
        """
        protected = [t for t in targets if self.locations[t.path].kind == "block" or t.path in self.foreign]
        foreign = [t.path for t in targets if t.path in self.foreign]
        if foreign and len(protected) < len(targets):
            others = ", ".join(t.path for t in targets if t not in protected)
            self.refused.add(
                f"target {', '.join(foreign)} exists and iobench did not create it, so read points open it "
                f"read-only (fio --readonly), but it shares a fio process with {others}, which fio may have "
                "to lay out; use `launch: per-target`, or allow it to be written"
            )
        return len(protected) == len(targets)

    def numjobs(self, combo: Combo) -> int:
        return int(self.matrix.setting(combo, "numjobs") or 1)

    def place(self, combo: Combo, targets: tuple[Target, ...]) -> Placement | Skip:
        binding = str(combo.get("binding", "none"))
        placement = str(combo.get("placement", "node"))
        numjobs = self.numjobs(combo)
        homes = {self.home(t) for t in targets}
        if len(homes) > 1 and binding in ("local", "remote"):
            nodes = ", ".join(f"{t.path} on node {self.home(t)}" for t in targets)
            return Skip(
                f"binding {binding} needs the targets on one node ({nodes}); use `launch: per-target`"
            )
        label = targets[0].path if len(targets) == 1 else None
        return resolve_placement(binding, placement, numjobs, homes.pop(), self.topology, target=label)

    def settings(self, combo: Combo) -> dict[str, dict[str, Any]]:
        """``{disk: {setting: value}}`` the point writes to sysfs (docs/matrix.md, device settings)."""
        wanted = {name: combo[name] for name in SETTINGS if name in combo}
        if not wanted:
            return {}
        settings: dict[str, dict[str, Any]] = {}
        for target in self.matrix.targets:
            disks = self.locations[target.path].disks
            if not disks:
                self.problems.add(
                    f"target {target.path} has no block device under it (tmpfs or overlay?); "
                    f"{' and '.join(wanted)} need one"
                )
            for disk in disks:
                settings.setdefault(disk, {}).update(wanted)
        return settings

    def point(self, index: int, combo: Combo) -> list[PlannedRun]:
        writes = point_writes(self.matrix, combo)
        settings = self.settings(combo)
        expected = _expected_seconds(self.matrix, combo)
        launch = str(combo.get("launch", self.matrix.launch))
        groups = [(t,) for t in self.matrix.targets] if launch == "per-target" else [self.matrix.targets]
        processes: list[FioProcess] = []
        reason = None
        for group in groups:
            placed = self.place(combo, group)
            if isinstance(placed, Skip):
                reason = placed.reason
                break
            name = group[0].section if launch == "per-target" else ""
            processes.append(self.process(combo, index, group, placed, writes, name))
        return [
            PlannedRun(
                point=index,
                repeat=repeat,
                params=combo,
                status="skipped" if reason else "run",
                reason=reason,
                processes=() if reason else tuple(processes),
                settings=settings,
                writes=writes,
                timeout_s=_timeout(self.matrix, expected),
                expected_s=expected,
                runtime_s=_runtime_seconds(self.matrix, combo),
            )
            for repeat in range(1, self.matrix.repeat + 1)
        ]


def _ordered(runs: list[list[PlannedRun]], order: str, seed: int | None) -> list[PlannedRun]:
    if order == "sequential":
        return [run for point in runs for run in point]
    interleaved = [point[r] for r in range(len(runs[0]) if runs else 0) for point in runs]
    if order == "shuffled":
        random.Random(seed).shuffle(interleaved)
    return interleaved


def refuse_unsafe(planner: _Planner) -> None:
    """Raise what the planner found unsafe to run (see :meth:`_Planner.read_only`).

    Raises
    ------
    SafetyError
        Naming each target and the fix.
    """
    if planner.refused:
        prefix = f"host {planner.host}: " if planner.host else ""
        raise SafetyError(
            "refused, nothing was run:\n" + "\n".join(f"  {prefix}{r}" for r in sorted(planner.refused))
        )


def check_opened(matrix: Matrix, points: list[list[PlannedRun]], targets: Iterable[Target]) -> None:
    """Refuse a plan in which fio would open, for any job section, another file than its target.

    Every distinct job file of the plan is read by fio's own parser, once
    (:func:`~iobench.planner.jobfile.opened_problems`): what fio opens is then
    exactly what the write guard judged, whatever fio's grammar does to a path.

    Parameters
    ----------
    matrix
        The matrix planned (its fio binary parses the job files).
    points
        Each point's runs; the first repeat's processes hold the point's job files.
    targets
        The targets the job sections name (this machine's or the hosts'), for
        where each was given.

    Raises
    ------
    SafetyError
        Naming each target, point and what fio would open instead.
    FioError
        When fio rejects a job file or cannot say what it opens.
    """
    where = {t.path: t.where for t in targets}
    jobs: dict[str, tuple[FioProcess, list[int]]] = {}
    for runs in points:
        for process in runs[0].processes:
            jobs.setdefault(process.jobfile, (process, []))[1].append(runs[0].point)
    ordered = list(jobs.values())
    asked = [(p.jobfile, dict(zip(p.sections, p.targets, strict=True))) for p, _ in ordered]
    found = opened_problems(fio_catalog(matrix.fio_binary), asked)
    lines = []
    for index, sections in sorted(found.items()):
        process, at = ordered[index]
        for section, problem in sections.items():
            path = dict(zip(process.sections, process.targets, strict=True)).get(section, "")
            host = f"host {process.host}: " if process.host else ""
            said = f"{where[path]}: " if where.get(path) else ""
            lines.append(
                f"{said}{host}target {path or '?'} (point {', '.join(map(str, at))}, "
                f"{process.jobfile_name} [{section}]): {problem}"
            )
    if lines:
        raise SafetyError(
            "refused, nothing was run: fio would not open the files the write guard judged:\n"
            + "\n".join(f"  {line}" for line in lines)
        )


def _merge(index: int, combo: Combo, per_site: dict[str | None, list[PlannedRun]]) -> list[PlannedRun]:
    """One run per repeat from each site's runs of the point (one site: its runs as they are)."""
    if list(per_site) == [None]:
        return per_site[None]
    merged = []
    for parts in zip(*per_site.values(), strict=True):
        skipped = [(name, p) for name, p in zip(per_site, parts, strict=True) if p.status == "skipped"]
        reason = "; ".join(f"host {name}: {p.reason}" for name, p in skipped) or None
        settings = {
            f"{name}:{disk}": values
            for name, p in zip(per_site, parts, strict=True)
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


_PLACING = ("binding", "placement")


def _run_once(
    points: list[list[PlannedRun]], planners: Mapping[str | None, _Planner]
) -> list[list[PlannedRun]]:
    """Points that differ only in ``binding``/``placement`` and place every fio process alike run once.

    On one NUMA node ``binding: local`` and ``none`` run on the same CPUs with
    the same memory; with one job (or no SMT) ``same-core`` and ``diff-cores``
    pin to the same CPU. The later such point is skipped, its reason naming the
    point that runs and why (:func:`~iobench.planner.placement.coinciding_reason`),
    so no figure contrasts two labels of one placement.
    """
    runs_first: dict[tuple[Any, ...], PlannedRun] = {}
    out = []
    for runs in points:
        head = runs[0]
        if head.status != "run" or not set(_PLACING) & set(head.params):
            out.append(runs)
            continue
        rest = tuple(sorted((k, repr(v)) for k, v in head.params.items() if k not in _PLACING))
        where = tuple(
            (
                p.host,
                p.targets,
                p.cpus,
                p.job_cpus,
                memory_nodes(p.mem_node, planners[p.host].topology),
            )
            for p in head.processes
        )
        first = runs_first.setdefault((rest, where), head)
        if first is head:
            out.append(runs)
            continue
        planner = planners[head.processes[0].host]
        why = "; ".join(
            coinciding_reason(
                axis,
                str(first.params.get(axis, "none" if axis == "binding" else "node")),
                str(head.params.get(axis, "none" if axis == "binding" else "node")),
                planner.numjobs(head.params),
                planner.topology,
            )
            for axis in _PLACING
            if first.params.get(axis) != head.params.get(axis)
        )
        hosts = [p.host for p in head.processes if p.host is not None]
        here = f" on {'each host' if len(hosts) > 1 else f'host {hosts[0]}'}" if hosts else ""
        reason = f"{SAME_AS}{first.point}{here}: {why}"
        out.append(
            [
                dataclasses.replace(r, status="skipped", reason=reason, processes=(), same_as=first.point)
                for r in runs
            ]
        )
    return out


def _settings_problems(
    site: SiteFacts, planner: _Planner, points: list[list[PlannedRun]], drop: bool
) -> set[str]:
    """Every device setting must be one the site's disk accepts, checked before anything runs."""
    problems = {site.label + p for p in planner.problems}
    distinct: dict[str, dict[str, set[Any]]] = {}
    for point in points:
        for key, wanted in point[0].settings.items():
            owner, _, disk = key.rpartition(":")
            if (owner or None) != site.host:
                continue
            for name, value in wanted.items():
                distinct.setdefault(disk, {}).setdefault(name, set()).add(value)
    for disk, names in distinct.items():
        for name, choices in names.items():
            for value in sorted(choices, key=str):
                problems.update(site.label + p for p in validate({disk: {name: value}}, system=site.system))
    for disk in sorted(site.system_disks & set(distinct)):
        problems.add(
            f"{site.label}disk {disk} holds / (the system disk): iobench does not change its "
            f"{' or '.join(sorted(distinct[disk]))}; put the target on another disk or a loop device"
        )
    if drop and site.drop_caches is False:
        problems.add(f"{site.label}drop_caches: true needs root (it writes /proc/sys/vm/drop_caches)")
    return problems


def plan_points(
    matrix: Matrix, sites: Sequence[SiteFacts], *, seed: int | None = None, hosts: Sequence[HostFacts] = ()
) -> Plan:
    """Place every point × repeat of ``matrix`` on ``sites``: the one planner for this machine and for hosts.

    A point runs on one host (the ``host`` axis) or on every site at once,
    each site's part placed against that site's own topology; a point some
    site cannot place is skipped, naming the host (a point's numbers are those
    of all its sites together).

    Raises
    ------
    TopologyError
        A target's ``home_node`` is not a node of its site, or no point can be placed.
    TuningError
        A device setting some site cannot take.

    ``hosts``: each host's facts from the preflight, kept in the plan (``plan --json``, the manifest).
    """
    for site in sites:
        for target in site.targets:
            if target.home_node is not None and site.topology.node(target.home_node) is None:
                nodes = ", ".join(str(n.id) for n in site.topology.nodes)
                where = f"{site.label}" if site.host is not None else ""
                raise TopologyError(
                    f"{matrix.source}: {where}target {target.path}: home_node {target.home_node} is not a "
                    f"NUMA node {'there' if site.host is not None else 'of this machine'} (nodes: {nodes})"
                )
    planners = {
        site.host: _Planner(
            dataclasses.replace(matrix, targets=site.targets),
            site.topology,
            site.locations,
            site.fsroot,
            host=site.host,
            foreign=site.foreign,
        )
        for site in sites
    }
    by_configured = {h.name: site.host for h, site in zip(matrix.hosts, sites, strict=False) if h.name}
    points = []
    for index, combo in enumerate(matrix.combos, start=1):
        if "host" in combo:
            chosen = [by_configured[str(combo["host"])]]
        elif "host_count" in combo:  # a scale-out sweep: the first N hosts at once
            chosen = list(planners)[: int(str(combo["host_count"]))]
        else:
            chosen = list(planners)
        points.append(_merge(index, combo, {name: planners[name].point(index, combo) for name in chosen}))
    points = _run_once(points, planners)
    for planner in planners.values():
        refuse_unsafe(planner)
    check_opened(matrix, points, [t for site in sites for t in site.targets])
    problems: set[str] = set()
    for site in sites:
        problems |= _settings_problems(site, planners[site.host], points, matrix.drop_caches)
    if problems:
        raise TuningError(
            "device settings refused, nothing was run:\n" + "\n".join(f"  {p}" for p in sorted(problems))
        )
    if points and all(p[0].status == "skipped" for p in points):
        reasons = sorted({p[0].reason or "" for p in points})
        where = "on these hosts" if matrix.hosts else "on this machine"
        raise TopologyError(
            f"{matrix.source}: every point is skipped {where}:\n" + "\n".join(f"  {r}" for r in reasons)
        )
    if matrix.order == "shuffled":
        seed = (
            seed if seed is not None else matrix.seed if matrix.seed is not None else secrets.randbelow(2**31)
        )
    else:
        seed = None
    first = sites[0]
    disks = [disk for site in sites for location in site.locations.values() for disk in location.disks]
    warnings = tuple(sweep_findings(first.topology.placements(), disks)) if first.host is None else ()
    return Plan(
        matrix,
        tuple(_ordered(points, matrix.order, seed)),
        seed,
        first.fsroot,
        first.topology,
        first.locations if first.host is None else {},
        warnings,
        hosts=tuple(hosts),
        sites=tuple(sites),
    )


def local_site(matrix: Matrix, fsroot: str = "/", allow_write: Sequence[str] = ()) -> SiteFacts:
    """This machine as a site: its topology, its targets located and guarded (when live).

    Raises
    ------
    SafetyError
        When a point would write where it must not.
    TopologyError
        When sysfs cannot be read.
    """
    topology = discover_topology(fsroot)
    locations = {t.path: locate_target(t.path, topology) for t in matrix.targets}
    live = os.path.realpath(fsroot) == "/"
    if live:
        writes = any(point_writes(matrix, combo) for combo in matrix.combos)
        check_targets(matrix.targets, locations, writes=writes, allow_write=tuple(allow_write))
    system = SystemRoot(fsroot)
    return SiteFacts(
        host=None,
        label="",
        targets=matrix.targets,
        topology=topology,
        locations=locations,
        fsroot=fsroot,
        system=system,
        system_disks=frozenset(root_disks(SystemRoot())) if live else frozenset(),
        drop_caches=SystemRoot().writable("proc/sys/vm/drop_caches") if live else None,
        foreign=foreign_files(matrix.targets, locations, allow_write=tuple(allow_write))
        if live
        else frozenset(),
    )


def plan(
    matrix: Matrix,
    *,
    fsroot: str | os.PathLike[str] = "/",
    seed: int | None = None,
    allow_write: tuple[str, ...] | list[str] = (),
) -> Plan:
    """Plan every point × repeat of ``matrix`` without touching anything.

    Parameters
    ----------
    matrix
        From :func:`iobench.load_matrix`.
    fsroot
        Read ``fsroot/sys`` instead of ``/sys``: plan for a machine from a
        snapshot of its sysfs. Safety checks of the targets need the live
        machine and are left to ``run`` when ``fsroot`` is not ``/``.
    seed
        The shuffle seed for ``order: shuffled`` (default: the matrix's
        ``seed``, else a new one, recorded in the plan).
    allow_write
        The devices and existing files the user allows to be written (``--allow-write``):
        the only consent there is; a matrix's ``allow_write`` grants nothing.

    Raises
    ------
    SafetyError
        When a point would write where it must not.
    TopologyError
        When sysfs cannot be read, or no point can be placed on this machine.
    HostsRefused
        With ``hosts:``: a host is unreachable or fails a check (each host is
        read over SSH, nothing is changed on it).
    """
    root = os.fspath(fsroot)
    if matrix.hosts:
        if os.path.realpath(root) != "/":
            raise TopologyError(
                f"{matrix.source}: --fsroot plans for this machine's snapshot; a matrix with `hosts:` "
                "reads each host's topology over SSH (drop --fsroot)"
            )
        with Fleet(host_specs(matrix), fio_version=matrix.fio_version, allow_write=allow_write) as fleet:
            facts = fleet.preflight()
            return plan_points(matrix, host_sites(matrix, fleet), seed=seed, hosts=facts)
    return plan_points(matrix, [local_site(matrix, root, allow_write)], seed=seed)


def host_targets(matrix: Matrix, host: MatrixHost) -> tuple[Target, ...]:
    """The host's own targets, else the matrix's."""
    return host.targets if host.targets is not None else matrix.targets


def host_specs(matrix: Matrix) -> list[HostSpec]:
    """What the system layer needs of each of the matrix's hosts, in order."""
    specs = []
    for index, host in enumerate(matrix.hosts):
        combos = [
            c
            for c in matrix.combos
            if ("host" not in c or c["host"] == host.name)
            and ("host_count" not in c or int(str(c["host_count"])) > index)
        ]
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


def host_sites(matrix: Matrix, fleet: Fleet) -> list[SiteFacts]:
    """Each preflighted host of ``fleet`` as a site, in matrix order."""
    sites = []
    for spec, host in zip(matrix.hosts, fleet.hosts, strict=True):
        facts = host.facts
        assert facts is not None
        system = RemoteRoot(host, snapshot=facts.snapshot.root)
        machine = RemoteMachine(host, facts.snapshot)
        targets = host_targets(matrix, spec)
        sites.append(
            SiteFacts(
                host=facts.name,
                label=f"{host.describe()}: ",
                targets=targets,
                topology=facts.topology,
                locations=facts.locations,
                fsroot=str(facts.snapshot.root),
                system=system,
                system_disks=frozenset(root_disks(facts.snapshot.system, machine)),
                drop_caches=system.writable("proc/sys/vm/drop_caches") if matrix.drop_caches else None,
                foreign=foreign_files(targets, facts.locations, machine, fleet.allow_write),
            )
        )
    return sites


def client_argv(
    fio_binary: str,
    processes: Sequence[FioProcess],
    clients: Mapping[str, str] | None = None,
    output: str = "fio.json",
) -> list[str]:
    """The point's one fio client command from its hosts' processes.

    Parameters
    ----------
    fio_binary
        This machine's fio.
    processes
        The point's processes (each with a ``host``).
    clients
        Host name → what ``--client=`` takes (``sock:host-a``, a link in the
        point's folder to the host's server); None keeps the host names (what ``plan`` shows).
    output
        The JSON output file.
    """
    argv = [fio_binary, "--output-format=json+", f"--output={output}"]
    for process in processes:
        part = list(process.argv)
        if clients is not None and process.host is not None:
            part[0] = f"--client={clients[process.host]}"
        argv += part
    return argv


def target_facts(target: Target, location: TargetLocation, topology: Topology) -> dict[str, Any]:
    """A target as located on a machine, with its disks' facts: what a run's manifest keeps of it."""
    disks = [topology.device(name) for name in location.disks]
    return {
        "path": target.path,
        "section": target.section,
        "kind": location.kind,
        "device": location.device,
        "home_node": location.home_node if location.home_node is not None else target.home_node,
        "size": target.size,
        "allow_write": target.allow_write,
        "disks": [
            {
                "name": d.name,
                "model": d.model,
                "firmware": d.firmware,
                "size_bytes": d.size_bytes,
                "rotational": d.rotational,
                "numa_node": d.numa_node,
                "scheduler": d.scheduler,
                "readahead_kb": d.readahead_kb,
            }
            for d in disks
            if d is not None
        ],
    }
