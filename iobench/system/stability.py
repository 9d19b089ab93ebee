"""The machine's settings that make storage numbers unstable or misleading: show, tune, reset.

``iobench system show`` reads each setting below through a
:class:`~iobench.system.hostfs.SystemRoot` (this machine, a snapshot, or a host
through :class:`~iobench.system.remote.RemoteRoot`) and gives it a verdict:

=====================  =========================================================================
setting                why it matters to a storage benchmark
=====================  =========================================================================
``cpu-governor``       a governor other than ``performance`` ramps the clock with load: the first
                       seconds of a point, and light points, run slower
``cpu-boost``          turbo/boost makes the clock depend on temperature and on what the other
                       cores do
``c-states``           deep idle states add their exit latency to every completion a sleeping
                       CPU takes (low queue depths feel it most)
``smt``                two hardware threads share a core: a point depends on its sibling
``thp``                ``always``: khugepaged and compaction stall allocations during a run
``irqbalance``         moves the devices' interrupts between CPUs while a run goes
``nvme-poll-queues``   without poll queues ``hipri``/polled I/O silently falls back to interrupts
``nvme-coalescing``    interrupt coalescing holds completions back to batch them
``write-cache``        a volatile write cache acknowledges writes before they are durable
``swap``               swapping competes with the benchmark's I/O
``numa-balancing``     the kernel moves pages and tasks between nodes, against a point's binding
=====================  =========================================================================

``tune`` sets, at runtime, what can be set that way: the governor
(``performance``), boost (off), idle states deeper than :data:`CSTATE_LATENCY_US`
(disabled), transparent huge pages (``madvise``) and NUMA balancing (off). Each
file's value is saved first in the settings journal of
:mod:`iobench.system.tuning`, the one that also holds device settings, so
``iobench system reset`` and ``iobench restore`` put them back. The other
settings need a reboot, a module parameter or a service manager: ``tune`` names
them with the reason and changes nothing.

One class per setting, with what it reads and what it would write (pyperf's
``system`` command is the model; its ``Operation`` classes hard-code ``/sys`` and
reset to fixed defaults, where these take the root as a parameter and restore
what was there).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iobench.errors import TuningError
from iobench.system import blockdevs, procfs
from iobench.system.cpulist import format_cpulist, parse_cpulist
from iobench.system.hostfs import SystemFileError, SystemRoot
from iobench.system.topology import parse_scheduler
from iobench.system.tuning import (
    journal_system,
    pending_system_journal,
    restore_system,
    system_file_allowed,
    undo_journal_system,
)

__all__ = [
    "CSTATE_LATENCY_US",
    "SETTINGS",
    "VERDICTS",
    "Setting",
    "SettingState",
    "UnchangeableSetting",
    "reset",
    "left_alone",
    "setting_facts",
    "settings_to_tune",
    "show",
    "tune",
]

#: What a setting's verdict can be. ``warning``: it makes numbers unstable or misleading;
#: ``note``: a fact that shapes the numbers and must be the same in runs compared; ``n/a``: not
#: present or not readable here (the note says which).
VERDICTS: tuple[str, ...] = ("ok", "note", "warning", "n/a")
#: Idle states whose exit latency exceeds this (µs) count as deep: ``tune`` disables them.
CSTATE_LATENCY_US = 20

_CPU = "sys/devices/system/cpu"
_THP = "sys/kernel/mm/transparent_hugepage"
_NUMA_BALANCING = "proc/sys/kernel/numa_balancing"


class UnchangeableSetting(TuningError):
    """``tune`` was asked for a setting it cannot change at runtime; nothing was changed."""


@dataclass(frozen=True)
class SettingState:
    """One setting as read now, with its verdict.

    Attributes
    ----------
    name : str
        Its name in ``iobench system tune NAME`` (``cpu-governor``).
    label : str
        How people call it.
    value : str
        What it is here, in words (``performance on CPUs 0-3``); ``–`` when unknown.
    verdict : str
        One of :data:`VERDICTS`.
    note : str
        Why the verdict, and what ``tune`` would do or why it cannot.
    tunable : bool
        ``tune`` can set it at runtime.
    writes : dict
        Path from ``/`` → the value ``tune`` would write (empty when it is already right).
    detail : dict
        What :attr:`value` says in words, as data for the validity checks of points that
        have only the manifest to go by (a host's): ``cpu-governor``: ``{"governors": {cpu:
        governor}}``; ``nvme-poll-queues``: ``{"poll_queues": n, "io_poll": {disk: 0 or 1}}``.
        Empty for the other settings.
    """

    name: str
    label: str
    value: str
    verdict: str
    note: str
    tunable: bool
    writes: dict[str, str] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The state as ``iobench system show --json`` prints it (and the manifest keeps it)."""
        return {
            "name": self.name,
            "label": self.label,
            "value": self.value,
            "verdict": self.verdict,
            "note": self.note,
            "tunable": self.tunable,
            "detail": self.detail,
        }


class Setting:
    """One setting: how to read it and, when it can be set at runtime, what ``tune`` writes.

    Subclasses set :attr:`name`, :attr:`label`, :attr:`tunable` (or :attr:`fixed`,
    why not) and implement :meth:`read`.
    """

    name = ""
    label = ""
    tunable = False
    #: Why ``tune`` leaves it alone (for settings that are not tunable).
    fixed = ""

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        """The setting as it is under ``system`` (``disks``: the targets' whole disks)."""
        raise NotImplementedError

    def state(
        self,
        value: str,
        verdict: str,
        note: str,
        writes: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> SettingState:
        """A :class:`SettingState` of this setting."""
        return SettingState(
            self.name, self.label, value, verdict, note, self.tunable, dict(writes or {}), dict(detail or {})
        )


# --- CPU -------------------------------------------------------------------------------------


def _online_cpus(system: SystemRoot) -> tuple[int, ...]:
    text = system.read_text(f"{_CPU}/online")
    if text:
        with contextlib.suppress(Exception):
            return parse_cpulist(text)
    return tuple(sorted(int(n[3:]) for n in system.list_dir(_CPU) if n.startswith("cpu") and n[3:].isdigit()))


def _by_value(values: Mapping[int, str]) -> str:
    """``performance on CPUs 0-3; powersave on CPU 4`` for per-CPU values."""
    groups: dict[str, list[int]] = {}
    for cpu, value in sorted(values.items()):
        groups.setdefault(value, []).append(cpu)
    parts = []
    for value, cpus in groups.items():
        parts.append(f"{value} on CPU{'s' if len(cpus) > 1 else ''} {format_cpulist(cpus)}")
    return "; ".join(parts)


class CpuGovernor(Setting):
    """``cpufreq/scaling_governor`` of every online CPU; ``performance`` keeps the clock up."""

    name = "cpu-governor"
    label = "CPU frequency governor"
    tunable = True
    WANTED = "performance"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        governors = {}
        writes = {}
        unable = []
        for cpu in _online_cpus(system):
            path = f"{_CPU}/cpu{cpu}/cpufreq/scaling_governor"
            governor = system.read_text(path)
            if governor is None:
                continue
            governors[cpu] = governor
            if governor != self.WANTED:
                offered = (
                    system.read_text(f"{_CPU}/cpu{cpu}/cpufreq/scaling_available_governors") or ""
                ).split()
                if self.WANTED in offered:
                    writes[path] = self.WANTED
                else:
                    unable.append(cpu)
        if not governors:
            return self.state("–", "n/a", "no cpufreq in sysfs: the clock is not scaled by the kernel here")
        detail = {"governors": {str(cpu): governor for cpu, governor in governors.items()}}
        if not writes and not unable:
            return self.state(_by_value(governors), "ok", "the clock stays at its highest", detail=detail)
        note = "the clock ramps with load: short and light points run slower"
        if unable:
            note += f"; CPU {format_cpulist(unable)} offer{'s' if len(unable) == 1 else ''} no {self.WANTED}"
        return self.state(
            _by_value(governors), "warning", note + f"; tune sets {self.WANTED}", writes, detail
        )


class CpuBoost(Setting):
    """Turbo/boost: ``cpufreq/boost`` (acpi-cpufreq, amd-pstate) or ``intel_pstate/no_turbo``."""

    name = "cpu-boost"
    label = "CPU boost (turbo)"
    tunable = True

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        for path, on, off in (
            (f"{_CPU}/intel_pstate/no_turbo", "0", "1"),
            (f"{_CPU}/cpufreq/boost", "1", "0"),
        ):
            value = system.read_text(path)
            if value is None:
                continue
            if value == off:
                return self.state(
                    "off", "ok", "the clock does not depend on temperature and other cores' load"
                )
            if value == on:
                return self.state(
                    "on",
                    "warning",
                    "the clock depends on temperature and on what the other cores do; tune turns it off",
                    {path: off},
                )
            return self.state(value, "n/a", f"/{path} holds {value!r}, not understood")
        return self.state("–", "n/a", "no boost control in sysfs (no cpufreq driver with boost)")


class CStates(Setting):
    """Idle states (``cpuidle/stateN``) enabled on the online CPUs, with their exit latency."""

    name = "c-states"
    label = "CPU idle states (C-states)"
    tunable = True

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        deepest: dict[int, tuple[str, int]] = {}
        writes = {}
        found = False
        for cpu in _online_cpus(system):
            folder = f"{_CPU}/cpu{cpu}/cpuidle"
            for state in system.list_dir(folder):
                if not state.startswith("state"):
                    continue
                latency = system.read_int(f"{folder}/{state}/latency")
                name = system.read_text(f"{folder}/{state}/name") or state
                disabled = system.read_text(f"{folder}/{state}/disable")
                if latency is None or disabled is None:
                    continue
                found = True
                if disabled != "0":
                    continue
                if latency > deepest.get(cpu, ("", -1))[1]:
                    deepest[cpu] = (name, latency)
                if latency > CSTATE_LATENCY_US:
                    writes[f"{folder}/{state}/disable"] = "1"
        limit = system.read_text("sys/module/intel_idle/parameters/max_cstate")
        limit_text = f"; intel_idle.max_cstate={limit}" if limit is not None else ""
        if not found:
            return self.state("–", "n/a", "no cpuidle states in sysfs" + limit_text)
        value = _by_value({cpu: f"{name} ({latency} µs)" for cpu, (name, latency) in deepest.items()})
        value = ("deepest enabled: " + value if value else "every state disabled") + limit_text
        if writes:
            return self.state(
                value,
                "warning",
                f"idle states with an exit latency over {CSTATE_LATENCY_US} µs delay the completions a sleeping "
                "CPU takes; tune disables them",
                writes,
            )
        return self.state(
            value, "ok", f"no enabled idle state takes longer than {CSTATE_LATENCY_US} µs to leave"
        )


class Smt(Setting):
    """Simultaneous multithreading: ``smt/control`` and ``smt/active``."""

    name = "smt"
    label = "SMT (hyper-threading)"
    fixed = (
        "turning SMT off takes CPUs offline under running processes; use the kernel's nosmt or smt/control"
    )

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        control = system.read_text(f"{_CPU}/smt/control")
        active = system.read_text(f"{_CPU}/smt/active")
        if control is None:
            return self.state("–", "n/a", "no smt/control in sysfs")
        if active == "1":
            return self.state(
                f"{control}, active",
                "note",
                "two hardware threads share each core: a point's numbers depend on what runs on its sibling "
                "(iobench's placement axis controls it)",
            )
        return self.state(control, "ok", "one hardware thread per core")


class TransparentHugePages(Setting):
    """``transparent_hugepage/enabled`` and ``defrag``: ``always`` stalls allocations during a run."""

    name = "thp"
    label = "transparent huge pages"
    tunable = True
    WANTED = "madvise"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        chosen: dict[str, str] = {}
        writes = {}
        for file in ("enabled", "defrag"):
            active, offered = parse_scheduler(system.read_text(f"{_THP}/{file}"))
            if active is None:
                continue
            chosen[file] = active
            if active == "always" and self.WANTED in offered:
                writes[f"{_THP}/{file}"] = self.WANTED
        if not chosen:
            return self.state("–", "n/a", "no transparent_hugepage in sysfs")
        value = ", ".join(f"{file} {active}" for file, active in chosen.items())
        if "always" in chosen.values():
            return self.state(
                value,
                "warning",
                "khugepaged and compaction stall memory allocations during a run; tune sets madvise",
                writes,
            )
        return self.state(value, "ok", "huge pages only where a program asks for them")


class IrqBalance(Setting):
    """Whether the ``irqbalance`` daemon runs (a process of that name)."""

    name = "irqbalance"
    label = "irqbalance daemon"
    fixed = "it is a service: stop it with the service manager (systemctl stop irqbalance) for the run"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        pids = procfs.pids(system)
        if not pids:
            return self.state("–", "n/a", "procfs cannot be listed")
        running = [pid for pid in pids if system.read_text(f"proc/{pid}/comm") == "irqbalance"]
        if running:
            return self.state(
                "running",
                "warning",
                f"it (pid {', '.join(map(str, running))}) moves the devices' interrupts between CPUs while a "
                "run goes: completions land on changing CPUs; " + self.fixed,
            )
        return self.state("not running", "ok", "interrupts stay where they are during a run")


def _nvme_disks(system: SystemRoot, disks: Sequence[str]) -> list[str]:
    names = disks or blockdevs.whole_disks(system)
    return [d for d in names if d.startswith("nvme")]


class NvmePollQueues(Setting):
    """The NVMe driver's ``poll_queues`` and each NVMe disk's ``queue/io_poll``."""

    name = "nvme-poll-queues"
    label = "NVMe poll queues"
    fixed = "poll queues are a module parameter (nvme.poll_queues=N at boot or module load)"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        queues = system.read_int("sys/module/nvme/parameters/poll_queues")
        nvme = _nvme_disks(system, disks)
        # Every target disk's io_poll goes into the detail (a loop device does not poll either).
        io_poll = {d: system.read_int(f"sys/block/{d}/queue/io_poll") for d in dict.fromkeys([*disks, *nvme])}
        detail = {"poll_queues": queues, "io_poll": {d: v for d, v in io_poll.items() if v is not None}}
        polled = {d: io_poll[d] for d in nvme}
        if queues is None and not any(v is not None for v in polled.values()):
            return self.state("–", "n/a", "no NVMe driver loaded", detail=detail)
        parts = [] if queues is None else [f"poll_queues={queues}"]
        parts += [f"{d} io_poll {v}" for d, v in polled.items() if v is not None]
        if queues == 0 or any(v == 0 for v in polled.values()):
            return self.state(
                ", ".join(parts),
                "note",
                "without poll queues hipri/polled I/O silently falls back to interrupts; " + self.fixed,
                detail=detail,
            )
        return self.state(", ".join(parts), "ok", "polled I/O is served by poll queues", detail=detail)


#: NVMe admin Get Features through ``NVME_IOCTL_ADMIN_CMD`` (linux/nvme_ioctl.h): struct
#: nvme_passthru_cmd is 72 bytes; opcode 0x0a; cdw10 holds the feature id; the answer is ``result``.
_NVME_IOCTL_ADMIN_CMD = 0xC0484E41
_PASSTHRU = struct.Struct("=BBHIIIQQIIIIIIIIII")
_GET_FEATURES = 0x0A
_INTERRUPT_COALESCING = 0x08


def nvme_feature(device: str, feature: int) -> int | None:
    """The current value of an NVMe feature of a controller (``/dev/nvme0``), or None when it cannot be asked.

    Parameters
    ----------
    device : str
        The controller's character device on this machine.
    feature : int
        The feature id (0x08: interrupt coalescing).

    Returns
    -------
    int or None
        Dword 0 of the completion; None without permission, device or support.
    """
    command = bytearray(
        _PASSTHRU.pack(_GET_FEATURES, 0, 0, 0, 0, 0, 0, 0, 0, 0, feature, 0, 0, 0, 0, 0, 0, 0)
    )
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = fcntl.ioctl(fd, _NVME_IOCTL_ADMIN_CMD, command)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if status != 0 else int(_PASSTHRU.unpack(bytes(command))[-1])


class NvmeCoalescing(Setting):
    """Each NVMe controller's interrupt coalescing (feature 0x08: aggregation time and threshold)."""

    name = "nvme-coalescing"
    label = "NVMe interrupt coalescing"
    fixed = "it is an NVMe feature: set it with nvme-cli (nvme set-feature -f 8 -v 0)"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        controllers = [c for c in system.list_dir("sys/class/nvme") if c.startswith("nvme")]
        if not controllers:
            return self.state("–", "n/a", "no NVMe controller")
        if not system.live:
            return self.state("–", "n/a", "asked of a controller only on this machine (an admin command)")
        values = {}
        for controller in controllers:
            value = nvme_feature(str(system.path(f"dev/{controller}")), _INTERRUPT_COALESCING)
            if value is not None:
                time_100us, threshold = (value >> 8) & 0xFF, value & 0xFF
                values[controller] = (
                    "off" if time_100us == 0 else f"{time_100us * 100} µs or {threshold + 1} entries"
                )
        if not values:
            return self.state("–", "n/a", "the controllers did not answer Get Features (needs root)")
        text = ", ".join(f"{c} {v}" for c, v in values.items())
        if any(v != "off" for v in values.values()):
            return self.state(text, "warning", "completions wait to be batched: latency rises; " + self.fixed)
        return self.state(text, "ok", "every completion raises its interrupt at once")


class WriteCache(Setting):
    """Each disk's ``queue/write_cache``: ``write back`` (volatile cache) or ``write through``."""

    name = "write-cache"
    label = "write cache of each target"
    fixed = "the kernel's write_cache only says whether it sends flushes, not what the device caches"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        names = list(disks) or [
            d for d in blockdevs.whole_disks(system) if not d.startswith(("loop", "ram", "zram"))
        ]
        caches = {d: system.read_text(f"sys/block/{d}/queue/write_cache") for d in names}
        known = {d: v for d, v in caches.items() if v is not None}
        if not known:
            return self.state("–", "n/a", "no disk with queue/write_cache")
        text = "; ".join(f"{d} {v}" for d, v in known.items())
        if any(v == "write back" for v in known.values()):
            return self.state(
                text,
                "note",
                "a volatile write cache acknowledges writes before they are durable: write numbers without "
                "fsync/flush depend on it",
            )
        return self.state(text, "ok", "writes are acknowledged once durable")


class Swap(Setting):
    """Active swap areas (``proc/swaps``) and ``vm.swappiness``."""

    name = "swap"
    label = "swap"
    fixed = "swapoff moves every swapped page back into memory; do it by hand when wanted"

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        text = system.read_text("proc/swaps")
        if text is None:
            return self.state("–", "n/a", "proc/swaps cannot be read")
        areas = blockdevs.swaps(system)
        swappiness = system.read_text("proc/sys/vm/swappiness")
        tail = f" (swappiness {swappiness})" if swappiness is not None else ""
        if not areas:
            return self.state("none" + tail, "ok", "nothing swaps during a run")
        on_targets = [a for a in areas if any(os.path.basename(a).startswith(d) for d in disks)]
        if on_targets:
            return self.state(
                ", ".join(areas) + tail,
                "warning",
                f"swap on a target's disk ({', '.join(on_targets)}) adds its I/O to the benchmark's",
            )
        return self.state(", ".join(areas) + tail, "note", "swapping during a run competes with its I/O")


class NumaBalancing(Setting):
    """``kernel.numa_balancing``: automatic NUMA page and task migration."""

    name = "numa-balancing"
    label = "automatic NUMA balancing"
    tunable = True

    def read(self, system: SystemRoot, disks: Sequence[str]) -> SettingState:
        value = system.read_text(_NUMA_BALANCING)
        if value is None:
            return self.state("–", "n/a", "no kernel.numa_balancing (a kernel without NUMA balancing)")
        if value == "0":
            return self.state("off", "ok", "pages and tasks stay where a point put them")
        return self.state(
            f"on ({value})",
            "warning",
            "the kernel moves pages and tasks between nodes during a run, against a point's binding; "
            "tune turns it off",
            {_NUMA_BALANCING: "0"},
        )


#: Every setting, in the order ``show`` lists them.
SETTINGS: tuple[Setting, ...] = (
    CpuGovernor(),
    CpuBoost(),
    CStates(),
    Smt(),
    TransparentHugePages(),
    IrqBalance(),
    NvmePollQueues(),
    NvmeCoalescing(),
    WriteCache(),
    Swap(),
    NumaBalancing(),
)
_BY_NAME = {setting.name: setting for setting in SETTINGS}


def show(system: SystemRoot | None = None, disks: Iterable[str] = ()) -> list[SettingState]:
    """Every setting of :data:`SETTINGS` as it is now, with its verdict.

    Parameters
    ----------
    system
        The machine's root (default this machine); a snapshot or a host's :class:`RemoteRoot`.
    disks
        The whole disks of the targets (their write cache, NVMe polling, swap on them);
        empty: every disk.

    Returns
    -------
    list of SettingState
        In :data:`SETTINGS` order. A setting that cannot be read is ``n/a`` with
        the reason; reading never raises.
    """
    root = system or SystemRoot()
    chosen = tuple(disks)
    return [setting.read(root, chosen) for setting in SETTINGS]


def settings_to_tune(names: Sequence[str] = ()) -> list[Setting]:
    """The settings ``tune`` would change for ``names``, refused before any machine is looked at.

    Parameters
    ----------
    names
        Settings to tune (:data:`SETTINGS` names); empty: every tunable setting.

    Returns
    -------
    list of Setting
        In the order named (each once), or :data:`SETTINGS` order.

    Raises
    ------
    UnchangeableSetting
        A name is unknown, or names a setting that cannot be set at runtime (each with why).
    """
    unknown = [n for n in names if n not in _BY_NAME]
    if unknown:
        raise UnchangeableSetting(
            f"no setting named {unknown[0]!r}; iobench system tune knows {', '.join(s.name for s in SETTINGS)}; "
            "nothing was changed"
        )
    chosen = [_BY_NAME[n] for n in dict.fromkeys(names)] or [s for s in SETTINGS if s.tunable]
    fixed = [f"{s.name}: {s.fixed}" for s in chosen if not s.tunable]
    if fixed:
        raise UnchangeableSetting("cannot tune, nothing was changed:\n" + "\n".join(f"  {p}" for p in fixed))
    return chosen


def left_alone(names: Sequence[str] = (), *, system: SystemRoot | None = None) -> list[SettingState]:
    """The settings ``tune(names)`` writes nothing for, as read now.

    Each is either as a benchmark wants it (verdict ``ok`` or ``note``) or
    not on this machine at all (``n/a``, the note says what is missing):
    two different things to tell whoever asked for it.

    Raises
    ------
    UnchangeableSetting
        As :func:`settings_to_tune`.
    """
    root = system or SystemRoot()
    states = [setting.read(root, ()) for setting in settings_to_tune(names)]
    return [s for s in states if not s.writes or not (names or s.verdict == "warning")]


def tune(
    names: Sequence[str] = (),
    *,
    system: SystemRoot | None = None,
    host: Mapping[str, Any] | None = None,
    seen: SystemRoot | None = None,
) -> list[str]:
    """Set what can be set at runtime for a benchmark, journaling each file's value first.

    Parameters
    ----------
    names
        Settings to tune (:data:`SETTINGS` names); empty: every tunable setting
        whose verdict is ``warning``.
    system
        The machine's root (default this machine): written, and read unless ``seen`` is given.
    host
        That host's record for the journal (so ``iobench restore`` reaches it); None for this machine.
    seen
        Where the settings and the values to journal are read, when not from ``system``: a
        snapshot of the host taken just before (one remote command, where reading a
        :class:`~iobench.system.remote.RemoteRoot` costs one per file).

    Returns
    -------
    list of str
        One line per file written (``/sys/...: powersave -> performance``);
        empty when everything was already as wanted.

    Raises
    ------
    UnchangeableSetting
        A named setting is unknown or cannot be set at runtime, or a file it
        needs is not writable: each is named with the reason, and nothing was changed.
    TuningError
        The journal could not be written (nothing changed) or the kernel refused
        a value (what was written before is put back).
    """
    root = system or SystemRoot()
    read = seen or root
    chosen = settings_to_tune(names)
    writes: dict[str, str] = {}
    for setting in chosen:
        state = setting.read(read, ())
        if names or state.verdict == "warning":
            writes.update(state.writes)
    problems = [f"/{path}: not a file iobench changes" for path in writes if not system_file_allowed(path)]
    problems += [f"/{path}: not writable; retry as root" for path in writes if not root.writable(path)]
    if problems:
        raise UnchangeableSetting(
            "cannot tune, nothing was changed:\n" + "\n".join(f"  {p}" for p in problems)
        )
    if not writes:
        return []
    originals = {path: _original(read, path) for path in writes}
    earlier = pending_system_journal(host)
    journal_system(originals, system=root, host=host)
    done: list[str] = []
    written: list[str] = []
    for path, value in writes.items():
        try:
            root.write_attribute(path, value)
        except SystemFileError as exc:
            unrestored = []
            for back in reversed(written):
                try:
                    root.write_attribute(back, originals[back])
                except SystemFileError:
                    unrestored.append(back)
            if unrestored:
                raise TuningError(
                    f"cannot write {value!r} to /{path}: {exc.strerror}; could not put back "
                    f"{', '.join('/' + p for p in unrestored)}: `iobench system reset` retries"
                ) from None
            undo_journal_system(earlier, host)
            raise TuningError(
                f"cannot write {value!r} to /{path}: {exc.strerror}; what was written before is put back"
            ) from None
        written.append(path)
        done.append(f"/{path}: {originals[path]} -> {value}")
    return done


def _original(system: SystemRoot, path: str) -> str:
    """The value to write back to ``path``: the selected word of a ``[bracketed]`` list, else the text."""
    text = system.read_text(path) or ""
    active, _ = parse_scheduler(text)
    return active if "[" in text and active is not None else text


def reset(*, system: SystemRoot | None = None, host: Mapping[str, Any] | None = None) -> list[str]:
    """Put back what :func:`tune` changed on this machine (or ``host``), from the settings journal.

    Returns
    -------
    list of str
        What was done; empty when nothing was pending.

    Raises
    ------
    TuningError
        A value could not be written back; the journal is kept for another try.
    """
    root = system or SystemRoot()
    if pending_system_journal(host) is None:
        return []
    return restore_system(system=root, host=host)


def setting_facts(states: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{"CPU frequency governor": "performance on CPUs 0-3", …}`` from saved states (a manifest's).

    Parameters
    ----------
    states
        :meth:`SettingState.to_json` dicts, as the manifest keeps them.

    Returns
    -------
    dict
        Label → value, for listing the differences between two runs' machines.
    """
    return {
        str(s.get("label") or s.get("name")): str(s.get("value"))
        for s in states
        if isinstance(s, Mapping) and (s.get("label") or s.get("name"))
    }
