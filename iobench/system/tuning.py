"""Device queue settings: validate, journal, apply, restore.

Originals are written to a journal file per disk *before* the first change,
so that a run killed with SIGKILL can still be undone by ``iobench restore``
(:func:`restore_from_journals`). A :class:`DeviceTuner` restores on every
way out of its ``with`` block: normal end, exception, Ctrl-C, and SIGTERM once
the caller turns it into an exception.

Everything here takes the sysfs root as a parameter so tests can use a tree in
``tmp_path``; sysfs and procfs are read and written through
:class:`iobench.system.hostfs.SystemRoot` (one ``write(2)`` per value, never a shell).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError, TuningError
from iobench.store.atomic import fsync_directory, private_dir, state_dir
from iobench.store.records import JournalRecord, RecordError, parse_record, write_record
from iobench.system import blockdevs, procfs
from iobench.system.hostfs import SystemFileError, SystemRoot
from iobench.system.process import signals_held
from iobench.system.sshoptions import target_problems
from iobench.system.topology import parse_scheduler

QUEUE_SETTINGS = ("scheduler", "readahead_kb")
_FILES = {"scheduler": "queue/scheduler", "readahead_kb": "queue/read_ahead_kb"}

Value = str | int
Settings = dict[str, Value]


# --- reading -----------------------------------------------------------------


def _disk_dir(disk: str, system: SystemRoot) -> Path:
    if not disk or "/" in disk or disk.startswith("."):
        raise TuningError(f"{disk!r} is not a disk name (expected e.g. sda, nvme0n1, loop0)")
    return system.block_dir(disk) or system.path("sys/block") / disk


def _setting_path(disk: str, name: str, system: SystemRoot) -> Path:
    if name not in _FILES:
        raise TuningError(f"unknown device setting {name!r}; iobench sets {', '.join(QUEUE_SETTINGS)}")
    return _disk_dir(disk, system) / _FILES[name]


def _read_text(system: SystemRoot, path: Path, disk: str) -> str:
    try:
        return system.read_required(path)
    except SystemFileError as exc:
        if exc.missing:
            raise TuningError(
                f"{disk} has no {path.parent.name}/{path.name} under {path.parents[2]}: "
                "not a whole disk (a partition, or gone?)"
            ) from None
        raise TuningError(str(exc)) from None


def _root(sysfs: str | os.PathLike[str], system: SystemRoot | None) -> SystemRoot:
    """``system`` when given (another host's, :class:`~iobench.system.remote.RemoteRoot`), else ``sysfs`` here."""
    return system if system is not None else SystemRoot(sysfs=sysfs)


def offered_schedulers(
    disk: str, sysfs: str | os.PathLike[str] = "/sys", *, system: SystemRoot | None = None
) -> tuple[str, ...]:
    """The I/O schedulers ``disk`` offers, in the kernel's order (``system``: another host's sysfs).

    Raises
    ------
    TuningError
        When ``<sysfs>/block/<disk>/queue/scheduler`` cannot be read.
    """
    system = _root(sysfs, system)
    return parse_scheduler(_read_text(system, _setting_path(disk, "scheduler", system), disk))[1]


def read_setting(
    disk: str, name: str, *, sysfs: str | os.PathLike[str] = "/sys", system: SystemRoot | None = None
) -> Value:
    """One queue setting of ``disk`` as in effect now (scheduler name, or readahead in KiB).

    ``system`` reads another host's sysfs instead of ``sysfs`` here.

    Raises
    ------
    TuningError
        When the file is missing or unreadable, or its content is not understood.
    """
    system = _root(sysfs, system)
    path = _setting_path(disk, name, system)
    text = _read_text(system, path, disk)
    if name == "scheduler":
        return parse_scheduler(text)[0] or ""
    try:
        return int(text)
    except ValueError:
        raise TuningError(f"{path} holds {text!r}, not a number of KiB") from None


def read_settings(
    disk: str, *, sysfs: str | os.PathLike[str] = "/sys", system: SystemRoot | None = None
) -> Settings:
    """Every setting of :data:`QUEUE_SETTINGS` for ``disk``.

    Parameters
    ----------
    disk
        A whole disk's name in ``<sysfs>/block`` (``sda``, ``nvme0n1``, ``loop0``).
    sysfs
        The sysfs root; a fake tree in tests.
    system
        Another host's sysfs (:class:`~iobench.system.remote.RemoteRoot`) instead of ``sysfs``.

    Returns
    -------
    dict
        ``{"scheduler": "mq-deadline", "readahead_kb": 128}``.

    Raises
    ------
    TuningError
        When the disk has no ``queue/`` directory or a file cannot be read.
    """
    return {name: read_setting(disk, name, sysfs=sysfs, system=system) for name in QUEUE_SETTINGS}


# --- validation at plan time -------------------------------------------------


def _value_problem(disk: str, name: str, value: object, system: SystemRoot) -> str | None:
    if name == "readahead_kb":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{disk}: readahead_kb {value!r} is not a whole number of KiB ≥ 0"
        return None
    if not isinstance(value, str) or not value:
        return f"{disk}: scheduler {value!r} is not a scheduler name"
    offered = offered_schedulers(disk, system=system)
    if value not in offered:
        return f"{disk} does not offer scheduler {value!r}; it offers {', '.join(offered) or 'none'}"
    return None


def _disk_problems(disk: str, wanted: Mapping[str, object], system: SystemRoot) -> list[str]:
    try:
        queue = _disk_dir(disk, system) / "queue"
    except TuningError as exc:
        return [str(exc)]
    if not system.is_dir(queue):
        return [f"{disk} has no {queue}: device settings need a whole block disk"]
    problems = []
    for name, value in wanted.items():
        try:
            path = _setting_path(disk, name, system)
            problem = _value_problem(disk, name, value, system)
        except TuningError as exc:
            problems.append(str(exc))
            continue
        if problem:
            problems.append(problem)
        elif not system.writable(path):
            problems.append(f"{disk}: {path} is not writable; retry as root")
    return problems


def validate(
    settings: Mapping[str, Mapping[str, object]],
    sysfs: str | os.PathLike[str] = "/sys",
    *,
    system: SystemRoot | None = None,
) -> list[str]:
    """Every problem with applying ``settings``, found without changing anything.

    Parameters
    ----------
    settings
        ``{disk: {setting: value}}``, e.g. ``{"nvme0n1": {"scheduler": "none"}}``.
        A target without a block device (a file on tmpfs) has no disk to name;
        the caller reports that.
    sysfs
        The sysfs root.
    system
        Another host's sysfs instead of ``sysfs``.

    Returns
    -------
    list of str
        One line per problem, each naming the disk; empty when all can be applied.
    """
    root = _root(sysfs, system)
    problems: list[str] = []
    for disk, wanted in settings.items():
        problems += _disk_problems(disk, wanted, root)
    return problems


# --- writing -----------------------------------------------------------------


def _write_file(system: SystemRoot, path: Path, text: str, what: str) -> None:
    """Write a sysfs or procfs attribute; errors name ``what``, the errno and, for EACCES/EPERM, root."""
    try:
        system.write_attribute(path, text)
    except SystemFileError as exc:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        hint = "; retry as root" if exc.errno in (errno.EACCES, errno.EPERM) else ""
        raise TuningError(f"cannot {what}: {exc.strerror} ({code}){hint}") from None


def write_setting(
    disk: str,
    name: str,
    value: Value,
    *,
    sysfs: str | os.PathLike[str] = "/sys",
    system: SystemRoot | None = None,
) -> Value:
    """Write one queue setting and return what is in effect afterwards (read back).

    The kernel may adjust a value (readahead is kept in whole pages), so the
    read-back value is what a result should record.

    Raises
    ------
    TuningError
        Naming the disk, setting, value and errno when the kernel refuses.
    """
    system = _root(sysfs, system)
    path = _setting_path(disk, name, system)
    _write_file(system, path, str(value), f"set {name} of {disk} to {value!r} ({path})")
    return read_setting(disk, name, system=system)


def drop_caches(*, proc: str | os.PathLike[str] = "/proc") -> None:
    """Flush dirty pages, then drop the page cache, dentries and inodes.

    Raises
    ------
    TuningError
        When ``<proc>/sys/vm/drop_caches`` cannot be written (not root).
    """
    os.sync()
    system = SystemRoot(procfs=proc)
    path = system.path("proc/sys/vm/drop_caches")
    _write_file(system, path, "3", f"drop caches ({path})")


# --- the journal ---------------------------------------------------------------


def journal_dir() -> Path:
    """Where journals of applied device settings live (``state_dir()/journal``)."""
    return state_dir() / "journal"


def _proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot; tells a live owner from a reused pid."""
    stat = procfs.process_stat(SystemRoot(), pid)
    return stat.start_ticks if stat is not None else None


@dataclass(frozen=True)
class Journal:
    """The original settings of one disk, saved before iobench changed them.

    Attributes
    ----------
    path : Path
        The journal file.
    disk : str
        The disk name in sysfs.
    dev : str
        The disk's ``major:minor`` when the journal was written; a disk that
        now has another number is another device and is not written.
    originals : dict
        Every setting of :data:`QUEUE_SETTINGS` as it was.
    pid, pid_start_ticks : int, int or None
        The process that changed the settings and its start time (from
        ``/proc/<pid>/stat``), so a reused pid is not mistaken for it.
    started : str
        When the settings were changed (ISO 8601, local time).
    run_dir : str or None
        The run directory of that run.
    sysfs : str
        The sysfs root the settings were written under; for the machine's
        own files (``journal`` ``system``), the fsroot holding ``sys/`` and ``proc/``.
    host : dict or None
        The host whose disk it is (:meth:`iobench.system.ssh.SshTarget.to_json`:
        ``destination``, ``options``, ``label``); None for this machine.
    """

    path: Path
    disk: str
    dev: str
    originals: Settings
    pid: int
    pid_start_ticks: int | None
    started: str
    run_dir: str | None
    sysfs: str
    host: dict[str, Any] | None = None
    journal: str = "disk"
    """``disk``: a disk's queue settings; ``system``: machine files (``originals`` keyed by path
    from ``/``, ``dev`` the boot id), changed by ``iobench system tune``."""

    @property
    def where(self) -> str:
        """The disk as messages name it: ``sda``, or ``a:sda`` on host a."""
        return self.disk if self.host is None else f"{_host_label(self.host)}:{self.disk}"

    def owner_alive(self) -> bool:
        """Whether the process that wrote this journal still runs (and will restore it)."""
        ticks = _proc_start_ticks(self.pid)
        return ticks is not None and ticks == self.pid_start_ticks

    def record(self) -> JournalRecord:
        """The journal file's content (:class:`iobench.store.records.JournalRecord`)."""
        return JournalRecord(
            disk=self.disk,
            dev=self.dev,
            originals=self.originals,
            pid=self.pid,
            pid_start_ticks=self.pid_start_ticks,
            started=self.started,
            run_dir=self.run_dir,
            sysfs=self.sysfs,
            host=self.host,
            journal="system" if self.journal == "system" else "disk",
        )

    @classmethod
    def load(cls, path: Path) -> Journal:
        """Read a journal file.

        Raises
        ------
        TuningError
            When the file is unreadable or not a journal; it names the file.
        """
        data = _read_journal(path)
        if data.journal == "system":
            strange = [name for name in data.originals if not system_file_allowed(name)]
            if strange:
                raise TuningError(
                    f"{path}: names {strange[0]!r}, a file iobench never changes; "
                    "restore the machine's settings by hand (or reboot) and delete the file"
                )
            originals = dict(data.originals)
        else:
            originals = {k: v for k, v in data.originals.items() if k in QUEUE_SETTINGS}
        return cls(
            path=path,
            disk=data.disk,
            dev=data.dev,
            originals=originals,
            pid=data.pid,
            pid_start_ticks=data.pid_start_ticks,
            started=data.started,
            run_dir=data.run_dir,
            sysfs=data.sysfs,
            host=_host_field(data.host),
            journal=data.journal,
        )


#: A journal is a few hundred bytes; one longer than this is not iobench's.
JOURNAL_LIMIT_BYTES = 65536
_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _journal_problem(data: JournalRecord) -> str | None:
    """What in a journal's content iobench would never have written, or None."""
    if not _WORD.match(data.disk) or data.disk.startswith("."):
        return f"disk {data.disk!r} is not a disk name"
    if not Path(data.sysfs).is_absolute() or any(c in data.sysfs for c in "\n\r\0"):
        return f"sysfs {data.sysfs!r} is not an absolute path"
    if data.journal == "disk":
        scheduler = data.originals.get("scheduler", "")
        readahead = data.originals.get("readahead_kb", 0)
        if not isinstance(scheduler, str) or (scheduler and not _WORD.match(scheduler)):
            return f"scheduler {scheduler!r} is not a scheduler's name"
        if not isinstance(readahead, int) or readahead < 0:
            return f"readahead_kb {readahead!r} is not a number of KiB"
    if data.host is not None:
        destination, options = data.host.get("destination"), data.host.get("options") or []
        if not isinstance(destination, str) or not isinstance(options, list):
            return "its host is not a destination and a list of ssh options"
        problems = target_problems(destination, [str(option) for option in options])
        if problems:
            return (
                f"its host is refused as a matrix's would be: {problems[0]}; iobench never runs ssh with it"
            )
    return None


def _read_journal(path: Path) -> JournalRecord:
    """A journal file, once its owner, mode and content check out (it decides what root writes, and where).

    Opened without following a link; this user's own regular file that no
    one else can write, at most :data:`JOURNAL_LIMIT_BYTES`, holding only
    what iobench writes: its host's destination and ssh options pass the
    checks a matrix's pass.

    Raises
    ------
    TuningError
        Naming the file and what is wrong with it.
    """
    hint = "restore that disk's settings by hand (or reboot) and delete the file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TuningError(f"{path}: cannot read the settings journal: {exc.strerror}; {hint}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise TuningError(
                f"{path}: not a settings journal of this user's (a regular file, uid {os.geteuid()}, "
                f"writable by no one else): uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}; {hint}"
            )
        raw = os.read(fd, JOURNAL_LIMIT_BYTES + 1)
    finally:
        os.close(fd)
    try:
        if len(raw) > JOURNAL_LIMIT_BYTES:
            raise RecordError(f"{path}: longer than {JOURNAL_LIMIT_BYTES} bytes, not a settings journal")
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            state = "empty" if not raw.strip() else "truncated or not JSON"
            raise RecordError(f"{path}: {state} settings journal ({exc})") from None
        data = parse_record(JournalRecord, decoded, path)
    except RecordError as exc:
        raise TuningError(f"{exc}; {hint}") from None
    problem = _journal_problem(data)
    if problem:
        raise TuningError(f"{path}: {problem}; {hint}")
    return data


def _host_label(host: Mapping[str, Any]) -> str:
    return str(host.get("label") or host.get("destination") or "?")


def _host_field(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None or not isinstance(value.get("destination"), str):
        return None
    return value


def host_id(host: Mapping[str, Any] | None) -> str:
    """Which host a record names, by how it is reached (destination and options), not by its label."""
    if host is None:
        return ""
    reached = json.dumps([host.get("destination"), list(host.get("options") or ())])
    return hashlib.sha256(reached.encode()).hexdigest()[:12]


def host_key(host: Mapping[str, Any] | None) -> str:
    """A file-name-safe key for a host record: its label (for people) and :func:`host_id`."""
    if host is None:
        return ""
    label = "".join(c if c.isalnum() or c in "._-" else "_" for c in _host_label(host))[:40]
    return f"{label}-{host_id(host)}"


def _journal_path(disk: str, host: Mapping[str, Any] | None = None) -> Path:
    if host is None:
        return journal_dir() / f"{disk}.json"
    return journal_dir() / f"{host_key(host)}@{disk}.json"


def _write_journal(journal: Journal) -> None:
    """Write atomically and durably: a crash leaves either no journal or a whole one."""
    try:
        private_dir(journal.path.parent)
        write_record(journal.path, journal.record(), mode=0o600)
    except OSError as exc:
        raise TuningError(
            f"cannot write journal {journal.path}: {exc.strerror}; nothing was changed"
        ) from None


def _remove_journal(journal: Journal) -> None:
    with contextlib.suppress(FileNotFoundError):
        journal.path.unlink()
    with contextlib.suppress(OSError):
        fsync_directory(journal.path.parent)


def _dev_of(disk: str, sysfs: str | os.PathLike[str], system: SystemRoot | None = None) -> str | None:
    return blockdevs.block_devno(_root(sysfs, system), disk)


def pending_journals() -> list[Journal]:
    """Journals of settings not yet restored, sorted by disk.

    Raises
    ------
    TuningError
        When a journal file cannot be read.
    """
    if not os.path.lexists(journal_dir()):
        return []
    try:
        paths = sorted(private_dir(journal_dir()).glob("*.json"))
    except OSError:
        return []
    return [Journal.load(path) for path in paths if not path.name.startswith(".")]


def check_no_pending(disks: Iterable[str], *, host: Mapping[str, Any] | None = None) -> None:
    """Refuse to tune disks whose earlier settings were never restored.

    Parameters
    ----------
    disks
        Disk names.
    host
        The host the disks are on (its record, see :attr:`Journal.host`); None: this machine.

    Raises
    ------
    TuningError
        Naming the disk and telling the user to run ``iobench restore``.
    """
    wanted = set(disks)
    key = host_id(host)
    for journal in pending_journals():
        if journal.journal == "disk" and journal.disk in wanted and host_id(journal.host) == key:
            raise TuningError(
                f"{journal.where} still has device settings from an earlier run (pid {journal.pid}, "
                f"started {journal.started}) that were not restored; run `iobench restore` first"
            )


def _restore_disk(
    disk: str, originals: Mapping[str, Value], sysfs: str, system: SystemRoot | None = None
) -> list[str]:
    """Write back each original that differs from what is in effect; return the failures."""
    failures = []
    for name in QUEUE_SETTINGS:
        if name not in originals:
            continue
        try:
            if read_setting(disk, name, sysfs=sysfs, system=system) != originals[name]:
                write_setting(disk, name, originals[name], sysfs=sysfs, system=system)
        except IobenchError as exc:  # TuningError, or a host that stopped answering
            failures.append(str(exc))
    return failures


def _describe(settings: Mapping[str, Value]) -> str:
    return ", ".join(f"{name} {settings[name]}" for name in QUEUE_SETTINGS if name in settings)


def _restore_journal(journal: Journal) -> tuple[str, list[str]]:
    # `iobench system tune` ends once it has tuned: its journal waits for `reset`, not for it.
    if journal.journal == "disk" and journal.owner_alive():
        return (
            f"{journal.where}: not restored: iobench pid {journal.pid} (started {journal.started}) "
            "is still running and restores it when it ends",
            [],
        )
    if journal.host is not None:
        from iobench.system.remote import remote_root

        try:
            with remote_root(journal.host) as system:
                return _restore_on(journal, system)
        except IobenchError as exc:
            return "", [f"{journal.where}: {exc}; the journal is kept: run `iobench restore` again"]
    return _restore_on(journal, None)


def _restore_on(journal: Journal, system: SystemRoot | None) -> tuple[str, list[str]]:
    if journal.journal == "system":
        return _restore_system(journal, system or SystemRoot(journal.sysfs))
    dev = _dev_of(journal.disk, journal.sysfs, system)
    if dev != journal.dev:
        _remove_journal(journal)
        now = "is gone" if dev is None else f"is now device {dev}, not {journal.dev}"
        return f"{journal.where}: {now}; nothing to restore, journal removed", []
    failures = _restore_disk(journal.disk, journal.originals, journal.sysfs, system)
    if failures:
        return "", failures
    _remove_journal(journal)
    return f"{journal.where}: restored {_describe(journal.originals)}", []


def restore_from_journals() -> list[str]:
    """Put back the settings of runs that ended without restoring (SIGKILL, crash, power loss).

    A journal whose owner is still running is left to it and reported.

    Returns
    -------
    list of str
        One line per journal saying what was done, each starting with the disk.

    Raises
    ------
    TuningError
        After trying every journal, when some setting could not be written
        back; those journals are kept for another try.
    """
    done: list[str] = []
    failures: list[str] = []
    for journal in pending_journals():
        line, failed = _restore_journal(journal)
        failures += failed
        if line:
            done.append(line)
    if failures:
        raise TuningError("could not restore every setting:\n" + "\n".join(f"  {f}" for f in failures))
    return done


# --- the machine's own settings (``iobench system tune``) ---------------------------------

#: The machine files ``iobench system tune`` may change, as paths from ``/``. The system journal
#: holds and restores only these: a journal naming any other file is refused, never written.
SYSTEM_FILES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern)
    for pattern in (
        r"sys/devices/system/cpu/cpu\d+/cpufreq/scaling_governor",
        r"sys/devices/system/cpu/cpufreq/boost",
        r"sys/devices/system/cpu/intel_pstate/no_turbo",
        r"sys/devices/system/cpu/cpu\d+/cpuidle/state\d+/disable",
        r"sys/kernel/mm/transparent_hugepage/(?:enabled|defrag)",
        r"proc/sys/kernel/numa_balancing",
    )
)
#: The journal's name in place of a disk's.
SYSTEM_JOURNAL = "system"


def system_file_allowed(path: str) -> bool:
    """Whether ``path`` (from ``/``, as ``sys/kernel/mm/...``) is one of :data:`SYSTEM_FILES`."""
    return any(pattern.fullmatch(path) for pattern in SYSTEM_FILES)


def boot_id(system: SystemRoot) -> str | None:
    """The kernel's id of this boot (``proc/sys/kernel/random/boot_id``): a reboot undoes runtime settings."""
    return system.read_text("proc/sys/kernel/random/boot_id")


def pending_system_journal(host: Mapping[str, Any] | None = None) -> Journal | None:
    """The machine's journal of ``host`` (None: this machine) not yet restored, if any.

    Raises
    ------
    TuningError
        When a journal file cannot be read.
    """
    key = host_id(host)
    return next(
        (j for j in pending_journals() if j.journal == "system" and host_id(j.host) == key),
        None,
    )


def journal_system(
    originals: Mapping[str, str], *, system: SystemRoot, host: Mapping[str, Any] | None = None
) -> Journal:
    """Save machine files' values before they are changed; a pending journal keeps its originals.

    Tuning twice must not record tuned values as originals: a file the pending
    journal of this host (and boot) already holds keeps the value it holds.

    Parameters
    ----------
    originals
        Path from ``/`` (one of :data:`SYSTEM_FILES`) → the value to write back.
    system
        The machine's root (``fsroot`` is recorded so the same files are restored).
    host
        The host's record (:attr:`Journal.host`); None for this machine.

    Returns
    -------
    Journal
        The journal now on disk.

    Raises
    ------
    TuningError
        When a path is not one iobench may change, or the journal cannot be written.
    """
    strange = [name for name in originals if not system_file_allowed(name)]
    if strange:
        raise TuningError(f"{strange[0]!r} is not a file `iobench system tune` changes")
    boot = boot_id(system) or ""
    earlier = pending_system_journal(host)
    kept = dict(earlier.originals) if earlier is not None and earlier.dev == boot else {}
    journal = Journal(
        path=_journal_path(SYSTEM_JOURNAL, host),
        disk=SYSTEM_JOURNAL,
        dev=boot,
        originals={**originals, **kept},
        pid=os.getpid(),
        pid_start_ticks=_proc_start_ticks(os.getpid()),
        started=earlier.started if earlier is not None and kept else time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        run_dir=None,
        sysfs=os.fspath(system.fsroot),
        host=None if host is None else dict(host),
        journal="system",
    )
    _write_journal(journal)
    return journal


def undo_journal_system(earlier: Journal | None, host: Mapping[str, Any] | None = None) -> None:
    """Put the machine's journal back as it was before :func:`journal_system` (``earlier``, or none).

    For a ``tune`` that wrote its journal, then had a value refused and wrote back what it had changed.
    """
    if earlier is not None:
        _write_journal(earlier)
        return
    current = pending_system_journal(host)
    if current is not None:
        _remove_journal(current)


def _restore_system(journal: Journal, system: SystemRoot) -> tuple[str, list[str]]:
    """Write back every file of a system journal; after a reboot there is nothing to write back."""
    boot = boot_id(system) or ""
    if boot != journal.dev:
        _remove_journal(journal)
        return (
            f"{journal.where}: rebooted since it was tuned; the boot's own settings stand, journal removed",
            [],
        )
    failures = []
    for name, value in sorted(journal.originals.items()):
        try:
            system.write_attribute(name, str(value))
        except SystemFileError as exc:
            failures.append(f"{journal.where}: cannot write {value!r} back to /{name}: {exc.strerror}")
        except IobenchError as exc:  # a host that stopped answering
            failures.append(f"{journal.where}: {exc}")
    if failures:
        return "", failures
    _remove_journal(journal)
    return f"{journal.where}: restored {len(journal.originals)} machine settings as they were", []


def restore_system(*, system: SystemRoot, host: Mapping[str, Any] | None = None) -> list[str]:
    """Put back the machine files ``iobench system tune`` changed on ``host``, from its journal.

    Returns
    -------
    list of str
        What was done (empty when no system journal is pending).

    Raises
    ------
    TuningError
        When a value could not be written back; the journal is kept for another try.
    """
    journal = pending_system_journal(host)
    if journal is None:
        return []
    line, failures = _restore_system(journal, system)
    if failures:
        raise TuningError("could not restore every setting:\n" + "\n".join(f"  {f}" for f in failures))
    return [line]


# --- the context manager -------------------------------------------------------


class DeviceTuner:
    """Apply device queue settings and put the originals back, whatever happens.

    Use it as a context manager: the originals of each disk are journalled
    before its first change and restored on leaving the block, also on an
    exception or ``KeyboardInterrupt``. A SIGKILLed run leaves its journal
    behind for :func:`restore_from_journals`.

    Parameters
    ----------
    sysfs
        The sysfs root.
    run_dir
        The run directory, recorded in the journal so a user can tell runs apart.
    system
        Another host's sysfs (:class:`~iobench.system.remote.RemoteRoot`) instead of ``sysfs``.
    host
        That host's record for the journal (:meth:`iobench.system.ssh.SshTarget.to_json`),
        so ``iobench restore`` can reach it after a crash.

    Examples
    --------
    >>> with DeviceTuner(run_dir="results/run1") as tuner:  # doctest: +SKIP
    ...     tuner.apply("nvme0n1", scheduler="none", readahead_kb=0)
    ...     run_fio()
    """

    def __init__(
        self,
        *,
        sysfs: str | os.PathLike[str] = "/sys",
        run_dir: str | None = None,
        system: SystemRoot | None = None,
        host: Mapping[str, Any] | None = None,
    ) -> None:
        self.sysfs = os.fspath(sysfs)
        self.run_dir = run_dir
        self.system = system
        self.host = None if host is None else dict(host)
        self._journals: dict[str, Journal] = {}
        self._applied: dict[str, Settings] = {}

    def __enter__(self) -> DeviceTuner:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        try:
            self.restore()
        except TuningError as problem:
            if exc is None:
                raise
            # Keep the exception that ended the block (and its exit code); say what is left.
            exc.add_note(f"{problem}\nrun `iobench restore` to retry")

    def _journal(self, disk: str) -> None:
        if disk in self._journals:
            return
        check_no_pending([disk], host=self.host)
        dev = _dev_of(disk, self.sysfs, self.system)
        if dev is None:
            raise TuningError(f"{disk} is not a disk under {self.sysfs}/block")
        journal = Journal(
            path=_journal_path(disk, self.host),
            disk=disk,
            dev=dev,
            originals=read_settings(disk, sysfs=self.sysfs, system=self.system),
            pid=os.getpid(),
            pid_start_ticks=_proc_start_ticks(os.getpid()),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            run_dir=self.run_dir,
            sysfs=self.sysfs,
            host=self.host,
        )
        _write_journal(journal)
        self._journals[disk] = journal

    def apply(self, disk: str, *, scheduler: str | None = None, readahead_kb: int | None = None) -> Settings:
        """Set ``disk``'s scheduler and/or readahead; None leaves a setting alone.

        Returns
        -------
        dict
            The settings in effect afterwards, read back from sysfs.

        Raises
        ------
        TuningError
            When an earlier run's journal for the disk is pending, the journal
            cannot be written, or the kernel refuses a value. Settings already
            applied stay recorded and are restored on exit.
        """
        wanted: dict[str, Value] = {}
        if scheduler is not None:
            wanted["scheduler"] = scheduler
        if readahead_kb is not None:
            wanted["readahead_kb"] = readahead_kb
        if not wanted:
            return self._applied.get(disk, {})
        self._journal(disk)
        effective = self._applied.setdefault(disk, {})
        for name, value in wanted.items():
            effective[name] = write_setting(disk, name, value, sysfs=self.sysfs, system=self.system)
        return dict(effective)

    def originals(self) -> dict[str, Settings]:
        """The settings each tuned disk had before the first change, by disk."""
        return {disk: dict(journal.originals) for disk, journal in self._journals.items()}

    def restore(self) -> None:
        """Write back every disk's originals and remove their journals.

        Raises
        ------
        TuningError
            When some setting could not be written back; every disk is still
            tried, and the journals of the failed ones are kept.
        """
        failures: list[str] = []
        with signals_held():
            for disk, journal in list(self._journals.items()):
                # A disk that went away (a detached loop) took its settings with it.
                try:
                    gone = _dev_of(disk, self.sysfs, self.system) != journal.dev
                except IobenchError as exc:  # the host stopped answering: the journal stays
                    failures.append(f"{journal.where}: {exc}")
                    continue
                failed = [] if gone else _restore_disk(disk, journal.originals, self.sysfs, self.system)
                if failed:
                    failures += failed
                    continue
                _remove_journal(journal)
                del self._journals[disk]
        if failures:
            raise TuningError("could not restore every setting:\n" + "\n".join(f"  {f}" for f in failures))
