"""A matrix becomes a plan: every point × repeat with its placement, job files and argv.

Planning reads the machine (sysfs) and the targets but changes nothing; ``run``
executes exactly what ``plan`` returns.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from iobench.errors import SafetyError, TopologyError, TuningError
from iobench.matrix.expand import Combo
from iobench.matrix.fiocatalog import fio_catalog
from iobench.matrix.model import Matrix, Target, point_writes
from iobench.matrix.values import IOBENCH_AXES, Duration, Value, fio_text
from iobench.planner.jobfile import opened_problems, render_jobfile
from iobench.planner.placement import Placement, Skip, job_binding, resolve_placement
from iobench.system.cpulist import format_cpulist
from iobench.system.hostfs import SystemRoot
from iobench.system.pcie import PcieFinding, sweep_findings
from iobench.system.safety import check_targets, foreign_files, root_disks
from iobench.system.topology import TargetLocation, Topology, discover_topology, locate_target
from iobench.system.tuning import QUEUE_SETTINGS as SETTINGS
from iobench.system.tuning import validate
from iobench.version import __version__

if TYPE_CHECKING:
    from iobench.system.hosts import HostFacts

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
    this host's part of the point's one ``fio --client`` command (:mod:`iobench.planner.hosts`)."""

    def to_json(self) -> dict[str, Any]:
        """The SPEC §1 ``processes[]`` object."""
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

    @property
    def key(self) -> str:
        """The run directory name of this point × repeat (``0003-r2``)."""
        return f"{self.point:04d}-r{self.repeat}"

    def to_json(self) -> dict[str, Any]:
        """The SPEC §1 ``plan --json`` object."""
        return {
            "point": self.point,
            "repeat": self.repeat,
            "key": self.key,
            "params": dict(self.params),
            "status": self.status,
            "reason": self.reason,
            "settings": self.settings,
            "writes": self.writes,
            "timeout_s": self.timeout_s,
            "processes": [p.to_json() for p in self.processes],
        }


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
    """Targets that are files iobench may not write: they exist, it did not create them, no ``allow_write``."""
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
        says no ``allow_write``) must not be laid out or extended, which fio
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
        """``{disk: {setting: value}}`` the point writes to sysfs (SPEC §4)."""
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


def _check_settings(planner: _Planner, points: list[list[PlannedRun]], root: str, drop: bool) -> None:
    """Every device setting must be one the disk accepts, checked before anything runs."""
    problems = set(planner.problems)
    distinct: dict[str, dict[str, set[Any]]] = {}
    for point in points:
        for disk, wanted in point[0].settings.items():
            for name, value in wanted.items():
                distinct.setdefault(disk, {}).setdefault(name, set()).add(value)
    for disk, names in distinct.items():
        for name, choices in names.items():
            for value in sorted(choices, key=str):
                problems.update(validate({disk: {name: value}}, sysfs=os.path.join(root, "sys")))
    live = os.path.realpath(root) == "/"
    system_disks = root_disks(SystemRoot()) if live and distinct else set()
    for disk in sorted(system_disks & set(distinct)):
        problems.add(
            f"disk {disk} holds / (the system disk): iobench does not change its "
            f"{' or '.join(sorted(distinct[disk]))}; put the target on another disk or a loop device"
        )
    if drop and live and not SystemRoot().writable("proc/sys/vm/drop_caches"):
        problems.add("drop_caches: true needs root (it writes /proc/sys/vm/drop_caches)")
    if problems:
        raise TuningError(
            "device settings refused, nothing was run:\n" + "\n".join(f"  {p}" for p in sorted(problems))
        )


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
        Devices the user allows to be written despite a signature (``--allow-write``).

    Raises
    ------
    SafetyError
        When a point would write where it must not (SPEC §5).
    TopologyError
        When sysfs cannot be read, or no point can be placed on this machine.
    HostsRefused
        With ``hosts:``: a host is unreachable or fails a check (each host is
        read over SSH, nothing is changed on it; :mod:`iobench.planner.hosts`).
    """
    root = os.fspath(fsroot)
    if matrix.hosts:
        if os.path.realpath(root) != "/":
            raise TopologyError(
                f"{matrix.source}: --fsroot plans for this machine's snapshot; a matrix with `hosts:` "
                "reads each host's topology over SSH (drop --fsroot)"
            )
        from iobench.planner.hosts import plan_remote

        return plan_remote(matrix, seed=seed, allow_write=allow_write)
    topology = discover_topology(root)
    for target in matrix.targets:
        if target.home_node is not None and topology.node(target.home_node) is None:
            nodes = ", ".join(str(n.id) for n in topology.nodes)
            raise TopologyError(
                f"{matrix.source}: target {target.path}: home_node {target.home_node} is not a NUMA node "
                f"of this machine (nodes: {nodes})"
            )
    locations = {t.path: locate_target(t.path, topology) for t in matrix.targets}
    writes = any(point_writes(matrix, combo) for combo in matrix.combos)
    if os.path.realpath(root) == "/":
        check_targets(matrix.targets, locations, writes=writes, allow_write=tuple(allow_write))
    if matrix.order == "shuffled":
        seed = (
            seed if seed is not None else matrix.seed if matrix.seed is not None else secrets.randbelow(2**31)
        )
    else:
        seed = None
    foreign = foreign_files(matrix.targets, locations) if os.path.realpath(root) == "/" else frozenset()
    planner = _Planner(matrix, topology, locations, root, foreign=foreign)
    points = [planner.point(i, combo) for i, combo in enumerate(matrix.combos, start=1)]
    refuse_unsafe(planner)
    check_opened(matrix, points, matrix.targets)
    _check_settings(planner, points, root, matrix.drop_caches)
    if points and all(p[0].status == "skipped" for p in points):
        reasons = sorted({p[0].reason or "" for p in points})
        raise TopologyError(
            f"{matrix.source}: every point is skipped on this machine:\n"
            + "\n".join(f"  {r}" for r in reasons)
        )
    disks = [disk for location in locations.values() for disk in location.disks]
    warnings = tuple(sweep_findings(topology.placements(), disks))
    return Plan(
        matrix, tuple(_ordered(points, matrix.order, seed)), seed, root, topology, locations, warnings
    )


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
