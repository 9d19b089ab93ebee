"""Is this number real? One verdict per point × repeat: the frame's ``validity`` columns.

A benchmark misleads most often through a trap in its set-up that someone else
finds later: reads served by the page cache or by memory, reads of holes, a
device whose counts are not fio's (write-back, merges) or whose data lives
below it (a loop device over a cached file), a queue depth fio never reached,
a job that ended inside its ramp, ``hipri`` without poll queues, another
process on the point's CPUs, a clock that ramps, a device that throttles,
writes a device compresses, a point that never settled, repeats too far
apart, fio's own warnings ignored. Each check below
is a pure function of what a point saved (its job files, fio's output and
stderr, ``meta.json`` with the facts read around fio by
:mod:`iobench.system.pointfacts`, the telemetry summary and steady-state
columns of the frame), so old and resumed runs are judged the same way, when
the frame is built.

The frame gets, per point × repeat (every row of it the same):

``validity``
    The codes of the checks that found something, space-separated
    (``page-cache sparse-read``); empty when nothing was found; NA for a point
    that did not finish ``ok`` (nothing to judge).
``validity_detail``
    One sentence per finding, with the measured figures, each starting with
    its code.
``validity_na``
    The checks that could not run and why (a counter this machine lacks, a
    run from before the facts were kept): never a finding.

docs/validity.md has every rule with its threshold and source; the thresholds
live here as constants and nowhere else.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iobench.errors import IobenchError
from iobench.matrix.units import parse_seconds
from iobench.planner.timelogs import DEFAULT_LOG_AVG_MSEC
from iobench.results.points import NOISY_CV, VALIDITY, over_repeats, parameter_columns, rate_totals
from iobench.results.telemetry import MISMATCH
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.store.untrusted import FIO_TEXT, open_regular, read_text, run_of
from iobench.system.cpulist import format_cpulist, parse_cpulist
from iobench.system.pointfacts import MEMORY_FS, NOT_LAID_OUT

#: The checks, in the order their findings are listed.
CODES: tuple[str, ...] = (
    "page-cache",
    "memory-backed",
    "sparse-read",
    "device-count",
    "data-elsewhere",
    "hipri-no-poll",
    "queue-depth",
    "ended-in-ramp",
    "cpu-contention",
    "freq-scaling",
    "throttled",
    "compressible-writes",
    "not-steady",
    "noisy",
    "host-overlap",
    "behind",
    "fio-warning",
)

# --- thresholds (docs/validity.md) ------------------------------------------------------------
#: A region whose share of holes (no data) reaches this % makes its reads sparse reads.
SPARSE_HOLE_PCT = 5.0
#: Without extents (a block device), reads this many times faster than the run's fastest writes to
#: the same target, with nothing written there before, may be reads of never-written blocks.
READ_WRITE_RATIO = 5.0
#: Other processes taking this mean share of the point's CPUs (%) ...
CONTENTION_MEAN_PCT = 5.0
#: ... or this share of any one of them (%) compete with fio.
CONTENTION_ONE_CPU_PCT = 20.0
#: A CPU clock that moved by this much (%) between the start and the end of the point.
FREQ_MOVE_PCT = 10.0
#: The hosts of a point ran together for less than this share (%) of the longest-running host's span.
MIN_OVERLAP_PCT = 90.0
#: Device models known to compress what they store (matched in the model name).
COMPRESSING_MODELS: tuple[str, ...] = ("ScaleFlux", "SandForce")
#: Lines of fio's warnings quoted in a detail.
QUOTED_LINES = 3
#: fio's I/Os or bytes and a device's, counted over the point (diskstats before and after fio),
#: differing by more than this % (sampled rates, without those counts: by more than ``MISMATCH``).
DEVICE_COUNT_PCT = 2.0
#: An open-loop window is short when its IOPS are more than this % below the offered ``rate_iops``.
BEHIND_SHORT_PCT = 1.0
#: ... and the point fell behind when this many windows in a row (one second each by default) were short.
BEHIND_WINDOWS = 2
#: ... counting only a shortfall beyond this many standard deviations of a Poisson count in the window.
BEHIND_POISSON_SD = 3.0
#: Fewer I/Os in flight per job (Little's law) than this % of the ``iodepth`` asked.
DEPTH_REACHED_PCT = 50.0
#: fio's output read whole (for its depth distribution) only up to this size.
MAX_OUTPUT_BYTES = 64 << 20

#: The constants docs/validity.md must name.
THRESHOLDS: tuple[str, ...] = (
    "MISMATCH",
    "SPARSE_HOLE_PCT",
    "READ_WRITE_RATIO",
    "CONTENTION_MEAN_PCT",
    "CONTENTION_ONE_CPU_PCT",
    "FREQ_MOVE_PCT",
    "NOISY_CV",
    "MIN_OVERLAP_PCT",
    "COMPRESSING_MODELS",
    "DEVICE_COUNT_PCT",
    "DEPTH_REACHED_PCT",
    "BEHIND_SHORT_PCT",
    "BEHIND_WINDOWS",
    "BEHIND_POISSON_SD",
    "INFORMATIONAL",
)


@dataclass(frozen=True)
class Check:
    """One check as docs/validity.md documents it: its code, rule, threshold and where its figures come from."""

    code: str
    rule: str
    threshold: str
    source: str


CHECKS: tuple[Check, ...] = (
    Check(
        "page-cache",
        "buffered I/O (no direct=1) whose bytes the target's device did not see; without device counters, "
        "buffered reads with invalidate=0 of a target smaller than the memory available",
        f"device bytes below 1/{MISMATCH:g} of fio's",
        "the device's bytes as `device-count` reads them; `MemAvailable` and the target's size",
    ),
    Check(
        "memory-backed",
        "the target's data is held in memory whatever `direct` says: a file on tmpfs or ramfs, a zram or brd "
        "device, a loop device over a file on tmpfs",
        "any",
        "the target's file system; its device stack down through loop devices' backing files",
    ),
    Check(
        "sparse-read",
        "reads of a region holding no data (holes, unwritten extents); for a block device whose data "
        "cannot be seen, reads far faster than the run's writes to it with nothing written before",
        f"{SPARSE_HOLE_PCT:g} % of the region",
        "SEEK_DATA/SEEK_HOLE on the file or a loop device's backing file",
    ),
    Check(
        "device-count",
        "fio's I/Os or bytes differ from the target device's completions or bytes over the point: requests "
        "merged or split, written back from the page cache, readahead, another process's I/O",
        f"{DEVICE_COUNT_PCT:g} % (counts); sampled rates: a factor of {MISMATCH:g}",
        "`/proc/diskstats` before and after fio vs fio's `total_ios`, `io_bytes`; else telemetry `dev_iops`, "
        "`dev_bw_bytes`",
    ),
    Check(
        "data-elsewhere",
        "the devices holding the target's data (below dm, md and loop devices, through a loop device's "
        "backing file) read or wrote fewer bytes than the target's device: a layer between served them",
        f"{DEVICE_COUNT_PCT:g} % fewer bytes",
        "`/proc/diskstats` of the holding devices before and after fio, `loop/dio`",
    ),
    Check(
        "hipri-no-poll",
        "hipri (polled completions) on a device whose queue has no polling",
        "io_poll 0",
        "`queue/io_poll`, the NVMe driver's `poll_queues`",
    ),
    Check(
        "queue-depth",
        "fio kept fewer I/Os in flight than the `iodepth` asked: a synchronous engine, or submission that "
        "could not keep up",
        f"below {DEPTH_REACHED_PCT:g} % of iodepth per job",
        "Little's law on fio's numbers: the frame's `inflight` (IOPS × mean latency) per job; fio's `iodepth_level`",
    ),
    Check(
        "ended-in-ramp",
        "a job ended inside `ramp_time`: fio counted I/Os but measured no latency, so its IOPS are of no "
        "measured window",
        "any I/O without latency samples",
        "fio's `total_ios` and latency sample counts, `ramp_time`",
    ),
    Check(
        "cpu-contention",
        "other processes (neither fio's, the kernel's nor iobench's) used the point's CPUs",
        f"{CONTENTION_MEAN_PCT:g} % of the point's CPUs on average",
        "telemetry `cpu_other_pct`, `cpu_other_max_pct`",
    ),
    Check(
        "freq-scaling",
        "a CPU of the point ran a governor other than performance, or its clock moved during the point",
        f"{FREQ_MOVE_PCT:g} % clock change",
        "`cpufreq/scaling_governor`, `scaling_cur_freq` before and after fio",
    ),
    Check(
        "throttled",
        "a CPU's thermal throttle count rose during the point, or a target disk's temperature reached its "
        "warning mark",
        "any rise; the sensor's own `temp1_max`",
        "`thermal_throttle/*_throttle_count`; hwmon `temp1_input`, `temp1_max`, `temp1_crit`",
    ),
    Check(
        "compressible-writes",
        "writes of fio's default buffer contents to a stack that compresses or deduplicates, without "
        "refill_buffers, buffer_compress_percentage or dedupe_percentage",
        "btrfs compress, ZFS, dm-vdo, zram, a known compressing device",
        "`/proc/self/mountinfo` options, dm names, device models",
    ),
    Check(
        "not-steady",
        "the point did not settle: fio's steadystate not attained, or its time series varied or drifted",
        "docs/timeseries.md's limits",
        "the frame's `steady` and `steady_reason`",
    ),
    Check(
        "noisy",
        "the repeats of the point lie far apart: their IOPS vary by a CV above the "
        "limit, the summary's `noisy`; the detail gives the 95 % CI of the mean too",
        f"CV above {100 * NOISY_CV:g} %, judged from 2 repeats",
        "`over_repeats` of the point totals",
    ),
    Check(
        "host-overlap",
        "the hosts of a point ran together for a small part of the point: they started or ended far apart, "
        "and the cluster's numbers (over the window all of them ran) leave the rest out",
        f"window below {MIN_OVERLAP_PCT:g} % of the longest host's span",
        "the frame's `window_s`, `start_skew_ms`, `overlap_pct` (each host's logs in Unix time)",
    ),
    Check(
        "behind",
        "an open-loop point (`rate_iops`) did not keep up with the load it was offered: its latency leaves out "
        "the time the I/Os it owed waited for their turn, so it is not valid as latency at that load",
        f"{BEHIND_WINDOWS} log windows in a row (`BEHIND_WINDOWS`) more than {BEHIND_SHORT_PCT:g} % below "
        f"the offered IOPS (`BEHIND_SHORT_PCT`) and more than {BEHIND_POISSON_SD:g} standard deviations of a "
        "Poisson count below them (`BEHIND_POISSON_SD`)",
        "fio's IOPS logs summed over the point's jobs per window, the last (cut short) left out, "
        "against `rate_iops` × those jobs; also the point's whole run (fio's IOPS) as one window",
    ),
    Check(
        "fio-warning",
        "fio printed something on stderr, or before its results",
        "any line but fio's informational ones (`INFORMATIONAL`)",
        "the point's `stderr.txt` and the head of fio's output file",
    ),
)

_NO_FACTS = "no facts were saved with the point (a run from before iobench read them, or not on this machine)"
_HOST_FACTS = "facts are read around fio on this machine only, and the point ran on {hosts}"
_READS = frozenset({"read", "randread", "rw", "readwrite", "randrw"})
# Engines that do no page-cache I/O at all: the null engine does no I/O; passthrough bypasses the cache.
_NO_CACHE_ENGINES = frozenset({"null", "io_uring_cmd", "sg"})
_TRUE = frozenset({"1", "true", "yes", "on", ""})
# fio's engines with FIO_SYNCIO: one I/O at a time per job, whatever iodepth says.
_SYNC_ENGINES = frozenset({"sync", "psync", "vsync", "pvsync", "pvsync2", "mmap", "splice"})


@dataclass
class Verdict:
    """What the checks said about one point × repeat."""

    found: list[tuple[str, str]] = field(default_factory=list)
    unable: list[tuple[str, str]] = field(default_factory=list)

    def finding(self, code: str, sentence: str) -> None:
        """A finding of ``code``: one sentence with its figures."""
        self.found.append((code, sentence))

    def na(self, code: str, why: str) -> None:
        """``code`` could not be checked, and why."""
        self.unable.append((code, why))

    def columns(self) -> tuple[str, str, str]:
        """``validity``, ``validity_detail`` and ``validity_na``, in :data:`CODES` order."""
        order = {code: index for index, code in enumerate(CODES)}
        found = sorted(self.found, key=lambda item: order[item[0]])
        unable = sorted(self.unable, key=lambda item: order[item[0]])
        codes = " ".join(dict.fromkeys(code for code, _ in found))
        detail = " ".join(f"{code}: {_sentence(text)}" for code, text in found)
        notes = " ".join(f"{code}: {_sentence(text)}" for code, text in unable)
        return codes, detail, notes


def _sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."


@dataclass
class PointView:
    """One point × repeat as the checks see it: what it saved, and the frame's numbers of it."""

    meta: PointMeta
    directory: Path
    options: dict[str, str] | None
    options_problem: str | None
    fio_bw: dict[str, float]
    dev_bw: dict[str, float]
    telemetry: dict[str, Any]
    jobs: list[dict[str, Any]]
    """The point's rows (job × direction) with :data:`JOB_COLUMNS`."""
    spread: dict[str, tuple[float, float, float, float]]
    run: RunView
    fio_iops: dict[str, float] = field(default_factory=dict)
    dev_iops: dict[str, float] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        """A fio option of the point (the job file's, ``[global]`` then its sections), or None when unset."""
        return None if self.options is None else self.options.get(name)

    def flag(self, name: str) -> bool:
        """Whether a fio option is set to a true value (``1``, ``true``, a bare ``name``, a number above 0)."""
        value = self.option(name)
        if value is None:
            return False
        value = value.strip().lower()
        if value in _TRUE:
            return True
        with contextlib.suppress(ValueError):
            return float(value) > 0
        return False

    @property
    def reads(self) -> bool:
        """Whether the point reads (``rw``: read, randread, rw, randrw; fio's default is read)."""
        rw = (self.option("rw") or self.option("readwrite") or "read").split(":")[0].strip().lower()
        return rw in _READS

    @property
    def buffered(self) -> bool:
        """Whether the point's I/O goes through the page cache (no ``direct=1``, no ``buffered=0``)."""
        if self.flag("direct"):
            return False
        buffered = self.option("buffered")
        return buffered is None or self.flag("buffered")

    @property
    def engine(self) -> str:
        """fio's ``ioengine`` (its default, psync, when unset)."""
        return (self.option("ioengine") or "psync").strip().lower()

    def facts(self, phase: str) -> dict[str, Any] | None:
        """``before`` or ``after`` of the point's saved facts; None when absent or not read (see :meth:`missing_facts`)."""
        saved = self.meta.facts or {}
        value = saved.get(phase)
        return value if isinstance(value, dict) and "cpus" in value else None

    def missing_facts(self) -> str:
        """Why the point has no facts to judge by: none saved, or the collector's note when it could not read them."""
        saved = (self.meta.facts or {}).get("before")
        if isinstance(saved, dict) and saved.get("notes"):
            return "; ".join(str(n) for n in saved["notes"])
        hosts = self.hosts()
        if hosts:
            return _HOST_FACTS.format(hosts=", ".join(f"host {h}" for h in hosts))
        return _NO_FACTS

    def hosts(self) -> list[str]:
        """The hosts the point ran on (``hosts:``); empty for a point of this machine."""
        return list(dict.fromkeys(p.host for p in self.meta.processes if p.host is not None))

    def targets(self) -> list[str]:
        """The point's targets, in order, each once."""
        return list(dict.fromkeys(t for p in self.meta.processes for t in p.targets))

    def seconds(self, name: str) -> float:
        """A fio time option in seconds (0 when unset or unreadable)."""
        with contextlib.suppress(ValueError):
            return parse_seconds(self.option(name) or "0")
        return 0.0

    def fio_counts(self) -> dict[str, tuple[float, float]]:
        """fio's I/Os and bytes per direction, over its jobs (``total_ios``, ``io_bytes``)."""
        out: dict[str, tuple[float, float]] = {}
        for job in self.jobs:
            ios, moved = job.get("total_ios"), job.get("io_bytes")
            if job.get("direction") in ("read", "write") and ios is not None and moved is not None:
                before = out.get(job["direction"], (0.0, 0.0))
                out[job["direction"]] = (before[0] + ios, before[1] + moved)
        return out

    def device_counts(self, devices: Iterable[str]) -> dict[str, tuple[float, float]] | None:
        """The I/Os and bytes per direction ``devices`` completed while fio ran (diskstats before and after it).

        None when the facts do not have them (a run from before iobench kept
        them, a point on hosts, a device without a diskstats line).
        """
        before = (self.facts("before") or {}).get("counts") or {}
        after = (self.facts("after") or {}).get("counts") or {}
        names = list(dict.fromkeys(devices))
        if not names or any(n not in before or n not in after for n in names):
            return None
        return {
            d: (
                float(sum(after[n][f"{d}_ios"] - before[n][f"{d}_ios"] for n in names)),
                float(sum(after[n][f"{d}_bytes"] - before[n][f"{d}_bytes"] for n in names)),
            )
            for d in ("read", "write")
        }

    def target_facts(self, target: str) -> dict[str, Any] | None:
        """What was read of ``target`` before fio (after, for a file fio laid out during the point)."""
        for phase in ("after", "before"):
            found = ((self.facts(phase) or {}).get("targets") or {}).get(target)
            if isinstance(found, dict):
                return found
        return None


@dataclass
class RunView:
    """What the checks need of the whole run: which points wrote which target when, and how fast; the hosts' settings."""

    writes: list[tuple[str, str, float]] = field(default_factory=list)
    """(started, target, the point's write bytes/s) of every ok point that wrote."""
    hosts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Per host of the run, ``iobench system show`` as the run started (the manifest's), by setting name."""
    hosts_problem: str | None = None
    """Why the manifest (and so the hosts' settings) could not be read."""

    def host_setting(self, host: str, name: str) -> tuple[dict[str, Any] | None, str]:
        """A host's setting as the run started, or None and why it is not known."""
        if self.hosts_problem is not None:
            return None, self.hosts_problem
        state = self.hosts.get(host, {}).get(name)
        if state is None:
            return (
                None,
                f"the run's manifest has no settings of host {host} (a run from before iobench kept them)",
            )
        return state, ""

    def wrote_before(self, target: str, started: str | None) -> bool:
        """Whether a point of the run wrote ``target`` before one that started at ``started``."""
        return started is not None and any(t == target and s < started for s, t, _ in self.writes)

    def fastest_write(self, target: str) -> float | None:
        """The fastest write bytes/s of a point of the run on ``target``."""
        rates = [bw for _, t, bw in self.writes if t == target and bw > 0]
        return max(rates) if rates else None


# --- formatting --------------------------------------------------------------------------------


def _rate(bytes_s: float) -> str:
    return f"{bytes_s / 2**20:.1f} MiB/s"


def _size(count: float) -> str:
    return f"{count / 2**30:,.1f} GiB" if count >= 2**30 else f"{count / 2**20:,.1f} MiB"


def _kib(count: float) -> str:
    return f"{count / 1024:,.1f} KiB"


def _cpus(cpus: Iterable[int]) -> str:
    listed = sorted(set(cpus))
    return f"CPU{'s' if len(listed) > 1 else ''} {format_cpulist(listed)}"


# --- the checks -----------------------------------------------------------------------------------


def _in_memory(p: PointView) -> str | None:
    """Why a target's data is held in memory, or None."""
    for target in p.targets():
        seen = p.target_facts(target) or {}
        # Facts from before iobench walked the stack have only the file system of a file target.
        held = seen.get("memory") or (
            f"{target} is on {seen['fstype']}"
            if seen.get("device") is None and seen.get("fstype") in MEMORY_FS
            else None
        )
        if held:
            return str(held)
    return None


def memory_backed(p: PointView, v: Verdict) -> None:
    """``memory-backed``: a target whose data is held in memory, whatever ``direct`` says."""
    held = None if p.options is None or p.engine == "null" else _in_memory(p)
    if held:
        v.finding(
            "memory-backed",
            f"{held}: every I/O is served from memory, not a storage device"
            + ("" if p.buffered else " (direct=1 bypasses the page cache, not the memory the data is in)"),
        )


def _devices(p: PointView, key: str) -> list[str] | None:
    """The targets' devices (``key="device"``) or the devices holding their data (``"holding"``); None if any is unknown."""
    found: list[str] = []
    for target in p.targets():
        seen = p.target_facts(target) or {}
        names = [seen.get("device")] if key == "device" else seen.get("holding")
        if not names or not all(isinstance(n, str) for n in names):
            return None
        found += [n for n in names if isinstance(n, str)]
    return list(dict.fromkeys(found)) or None


def _causes(p: PointView, direction: str, ios: float, size: float, tolerance: float) -> str:
    """What can make a device's counts differ from fio's that way (``ios``, ``size``: device over fio), none checked."""
    causes = []
    each = size / ios if ios > 0 else math.nan  # the device's mean request over fio's
    if each > 1 + tolerance:
        if p.buffered:
            causes.append(
                "write-back from the page cache in large requests (fio timed copies into memory)"
                if direction == "write"
                else "readahead in large requests (fio timed copies from memory)"
            )
        causes.append("the block layer merging fio's I/Os into larger requests")
    elif each < 1 - tolerance:
        causes.append("requests split by the device's size limits")
    if size < 1 - tolerance:
        causes.append(
            "the page cache (buffered I/O)"
            if p.buffered
            else "I/O the device had not completed when fio ended"
        )
    elif size > 1 + tolerance:
        if direction == "read" and p.buffered:
            causes.append("readahead")
        if p.seconds("ramp_time") > 0:
            causes.append("fio's ramp (ramp_time), which its own counts leave out")
        laid_out = ((p.facts("before") or {}).get("targets") or {}).values()
        if direction == "write" and any(
            f.get("note") == NOT_LAID_OUT for f in laid_out if isinstance(f, dict)
        ):
            causes.append("fio laying out the file first")
        if any((p.target_facts(t) or {}).get("kind") == "file" for t in p.targets()):
            causes.append("the file system's metadata and journal")
        causes.append(f"another process's {direction}s on the device")
    return ", ".join(causes)


def device_count(p: PointView, v: Verdict) -> None:
    """``device-count`` and ``page-cache``: fio's I/Os and bytes against the target device's.

    One comparison, two sources: the device's completions and bytes counted
    over the point (diskstats before and after fio, exact: :data:`DEVICE_COUNT_PCT`)
    or, without them, the telemetry's sampled rates (:data:`MISMATCH`).
    Buffered I/O whose bytes the device did not see is ``page-cache``; any
    other difference is ``device-count``, naming what can cause it.
    """
    if p.options is None or p.engine == "null" or _in_memory(p):
        return  # memory-backed judges a target held in memory
    devices = _devices(p, "device")
    counted = None if devices is None else p.device_counts(devices)
    if counted is not None:
        fio, dev, tolerance = p.fio_counts(), counted, DEVICE_COUNT_PCT / 100
        what = f"{', '.join(devices or ())} completed"
    else:
        fio = {d: (p.fio_iops.get(d, math.nan), bw) for d, bw in p.fio_bw.items()}
        dev = {d: (p.dev_iops.get(d, math.nan), bw) for d, bw in p.dev_bw.items()}
        tolerance, what = MISMATCH - 1, "the device's sampled rate:"
    judged = False
    for direction in ("read", "write"):
        if direction not in fio or direction not in dev or not fio[direction][1] > 0:
            continue
        judged = True
        (fio_ios, fio_bytes), (dev_ios, dev_bytes) = fio[direction], dev[direction]
        size = dev_bytes / fio_bytes
        if p.buffered and p.engine not in _NO_CACHE_ENGINES and size < 1 / MISMATCH:
            verb, why = (
                ("read", "buffered I/O served from the page cache")
                if direction == "read"
                else ("wrote", "buffered writes still in the page cache when the point ended")
            )
            fio_rate = p.fio_bw.get(direction, math.nan)
            v.finding(
                "page-cache",
                f"fio {verb} {_rate(fio_rate)} but the device saw {_rate(fio_rate * size)} of them "
                f"({100 * size:.2f} %): {why}",
            )
            continue
        ios = dev_ios / fio_ios if fio_ios > 0 else math.nan
        off = [r for r in (ios, size) if math.isfinite(r) and abs(r - 1) > tolerance]
        if counted is not None and p.seconds("ramp_time") > 0 and all(r > 1 for r in off):
            if off:
                v.na(
                    "device-count",
                    "the device's counts include fio's ramp (ramp_time), fio's do not: "
                    "only fewer I/Os or bytes than fio's are judged",
                )
            continue
        if not off:
            continue
        each = (
            f", {_kib(dev_bytes / dev_ios)} each against fio's {_kib(fio_bytes / fio_ios)}"
            if (dev_ios > 0 and fio_ios > 0)
            else ""
        )
        if counted is not None:
            figures = (
                f"fio {'read' if direction == 'read' else 'wrote'} {fio_ios:,.0f} I/Os ({_size(fio_bytes)}); "
                f"{what} {dev_ios:,.0f} {direction}s ({_size(dev_bytes)}{each})"
            )
        else:
            figures = (
                f"fio {direction}s at {fio_ios:,.0f} IOPS ({_rate(fio_bytes)}); {what} "
                f"{dev_ios:,.0f} IOPS ({_rate(dev_bytes)}{each})"
            )
        v.finding(
            "device-count",
            f"{figures}: {100 * ios:.1f} % of fio's I/Os, {100 * size:.1f} % of its bytes; possible causes, "
            f"none checked: {_causes(p, direction, ios, size, tolerance)}",
        )
    if judged:
        return
    _page_cache_by_size(p, v)


def data_elsewhere(p: PointView, v: Verdict) -> None:
    """``data-elsewhere``: the devices holding the targets' data saw fewer bytes than the targets' devices.

    Both counted over the point; what the target device itself did not see
    of fio's is ``device-count``'s (or ``page-cache``'s).
    """
    if p.options is None or p.engine == "null" or _in_memory(p):
        return
    devices, holding = _devices(p, "device"), _devices(p, "holding")
    if holding is None or devices is None or set(holding) == set(devices):
        return
    above, below = p.device_counts(devices), p.device_counts(holding)
    if above is None or below is None:
        v.na("data-elsewhere", f"no counts of {', '.join(holding)}, which hold the data, over the point")
        return
    parts = []
    for direction in sorted(p.fio_counts()):
        moved, held = above[direction][1], below[direction][1]
        if moved > 0 and (moved - held) / moved * 100 > DEVICE_COUNT_PCT:
            verb = "read" if direction == "read" else "wrote"
            parts.append(
                f"{', '.join(devices)} {verb} {_size(moved)} for fio, {', '.join(holding)} {_size(held)} of it "
                f"({100 * held / moved:.1f} %)"
            )
    if not parts:
        return
    loops = [loop for t in p.targets() for loop in (p.target_facts(t) or {}).get("loops") or ()]
    cached = [f"{loop['name']} over {loop['backing']}" for loop in loops if loop.get("dio") == 0]
    why = (
        f"{'; '.join(cached)} has no direct I/O (loop/dio 0, losetup's default): its backing file's page cache "
        "served the rest"
        if cached
        else "a layer between them served the rest (a cache in the stack, or the page cache of a file below)"
    )
    v.finding(
        "data-elsewhere",
        f"the data is held by {', '.join(holding)}: {'; '.join(parts)}; {why}: the figures are not "
        f"{', '.join(holding)}'s",
    )


def queue_depth(p: PointView, v: Verdict) -> None:
    """``queue-depth``: fio kept fewer I/Os in flight per job (Little's law) than the ``iodepth`` asked."""
    with contextlib.suppress(ValueError):
        asked = int(p.option("iodepth") or "1")
        per_job: dict[tuple[Any, ...], float] = {}
        for job in p.jobs:
            if job.get("inflight") is not None:
                key = (job.get("host"), job.get("jobname"), job.get("job_index"))
                per_job[key] = per_job.get(key, 0.0) + float(job["inflight"])
        if asked <= 1 or not per_job:
            return
        kept = sum(per_job.values()) / len(per_job)
        if kept * 100 < DEPTH_REACHED_PCT * asked:
            iops = sum(float(j.get("iops") or 0) for j in p.jobs) / len(per_job)
            why = (
                f"{p.engine} is a synchronous engine: it issues one I/O at a time whatever iodepth says"
                if p.engine in _SYNC_ENGINES
                else "fio could not keep that many in flight (submission bound by its CPU, a rate or thinktime "
                "limit, a depth the engine caps)"
            )
            levels = _depth_levels(p)
            v.finding(
                "queue-depth",
                f"fio kept {kept:.2f} I/Os in flight per job (Little's law: {iops:,.0f} IOPS × "
                f"{kept / iops * 1e6 if iops > 0 else math.nan:.1f} µs mean latency"
                + (f"; fio's own depth distribution: {levels}" if levels else "")
                + f"), not the {asked} asked (iodepth): {why}; the point's iodepth is what was asked, not what ran",
            )


def _depth_levels(p: PointView) -> str | None:
    """fio's own distribution of I/Os in flight (``iodepth_level``), averaged over the point's jobs; None if unread.

    Read only for a point ``queue-depth`` flags: the frame does not keep it.
    """
    sums: dict[str, float] = {}
    count = 0
    decoder = json.JSONDecoder()
    for output in dict.fromkeys(process.output for process in p.meta.processes):
        try:
            with (p.directory / output).open("rb") as handle:
                text = handle.read(MAX_OUTPUT_BYTES + 1).decode(errors="replace")
            if len(text) > MAX_OUTPUT_BYTES:
                continue
            doc, _ = decoder.raw_decode(text, text.index("{"))
        except (OSError, ValueError):
            continue
        jobs = (doc.get("jobs") or doc.get("client_stats") or []) if isinstance(doc, dict) else []
        for job in jobs:
            levels = job.get("iodepth_level") if isinstance(job, dict) else None
            if isinstance(levels, dict) and job.get("jobname") != "All clients":
                count += 1
                for level, share in levels.items():
                    if isinstance(share, int | float):
                        sums[str(level)] = sums.get(str(level), 0.0) + float(share)
    shown = [f"{share / count:.0f} % at {level}" for level, share in sums.items() if share / count >= 0.5]
    return ", ".join(shown) if count and shown else None


def ended_in_ramp(p: PointView, v: Verdict) -> None:
    """``ended-in-ramp``: a job counted I/Os but measured no latency, inside ``ramp_time``."""
    ramp = p.seconds("ramp_time")
    if ramp <= 0:
        return
    ended = [
        j
        for j in p.jobs
        if (j.get("total_ios") or 0) > 0 and j.get("lat_mean_us") is None and j.get("clat_mean_us") is None
    ]
    if ended:
        ios = sum(float(j["total_ios"]) for j in ended)
        names = ", ".join(dict.fromkeys(str(j.get("jobname")) for j in ended))
        v.finding(
            "ended-in-ramp",
            f"{names}: fio counted {ios:,.0f} I/Os but measured no latency — the job ended inside ramp_time "
            f"({ramp:g} s): its IOPS and bandwidth are of no measured window",
        )


def _page_cache_by_size(p: PointView, v: Verdict) -> None:
    """``page-cache`` without device counters: a buffered target that fits in the memory available."""
    if not p.buffered or p.engine in _NO_CACHE_ENGINES:
        return
    memory = (p.facts("before") or {}).get("mem_available")
    sizes = [(p.target_facts(t) or {}).get("region_bytes") for t in p.targets()]
    known = [s for s in sizes if isinstance(s, int | float) and s > 0]
    if not p.reads:
        v.na("page-cache", "buffered writes, but no device counters (telemetry off, or no block device)")
        return
    if p.option("invalidate") is None or p.flag("invalidate"):
        # fio drops the file's cached pages as each pass over it begins (invalidate=1, its default):
        # a job's reads reach the device, but pages another job read can still come from memory.
        v.na(
            "page-cache",
            "buffered reads without device counters (telemetry off, or no block device); fio drops the "
            "cached pages at each pass (invalidate=1), so only what other jobs read may come from memory",
        )
        return
    if isinstance(memory, int | float) and known:
        total = float(sum(known))
        if total < memory:
            v.finding(
                "page-cache",
                f"buffered reads (invalidate=0) of a {_size(total)} target with {_size(memory)} of memory "
                "available: it fits in the page cache (no device counters tell how much the device served)",
            )
        return
    v.na(
        "page-cache",
        "buffered reads (invalidate=0), but no device counters (telemetry off, or no block device) and no "
        "target size to compare with the memory available",
    )


def sparse_read(p: PointView, v: Verdict) -> None:
    """``sparse-read``: reads of holes (extents known), or reads far faster than the run's writes (not known)."""
    if p.options is None or not p.reads or p.engine == "null":
        return
    if p.facts("before") is None:
        v.na("sparse-read", p.missing_facts())
        return
    for target in p.targets():
        seen = p.target_facts(target) or {}
        region, data = seen.get("region_bytes"), seen.get("data_bytes")
        if isinstance(region, int) and isinstance(data, int) and region > 0:
            holes = max(0, region - data)
            if 100.0 * holes / region >= SPARSE_HOLE_PCT:
                where = seen.get("backing") or target
                v.finding(
                    "sparse-read",
                    f"{100.0 * holes / region:.1f} % of the {_size(region)} region read ({_size(holes)}) holds no "
                    f"data (holes or unwritten extents of {where}): those reads return zeros without touching "
                    "the device",
                )
            continue
        if p.run.wrote_before(target, p.meta.started):
            continue  # the run wrote it first: its reads are of data
        fastest, read = p.run.fastest_write(target), p.fio_bw.get("read")
        if fastest is not None and read is not None and read >= READ_WRITE_RATIO * fastest:
            v.finding(
                "sparse-read",
                f"reads of {target} at {_rate(read)} are {read / fastest:.1f}× the fastest writes to it in this "
                f"run ({_rate(fastest)}) and the run wrote nothing there before this point: the region may never "
                "have been written (never-written blocks read back without touching the media; iobench cannot "
                "see which regions of a block device hold data)",
            )
            continue
        why = seen.get("note") or "its data extents are unknown"
        v.na("sparse-read", f"{why} ({target})")


def hipri_no_poll(p: PointView, v: Verdict) -> None:
    """``hipri-no-poll``: ``hipri`` on a device whose queue does not poll."""
    if p.options is None or not (p.flag("hipri") or p.flag("hipri_percentage")):
        return
    disks = (p.facts("before") or {}).get("disks")
    if not isinstance(disks, dict) and p.hosts():
        _host_polling(p, v)
        return
    if not isinstance(disks, dict):
        v.na("hipri-no-poll", p.missing_facts())
        return
    known = {name: f for name, f in disks.items() if isinstance(f, dict) and f.get("io_poll") is not None}
    if not known:
        v.na("hipri-no-poll", f"io_poll could not be read for {', '.join(disks) or 'the targets'}")
        return
    unpolled = [
        _unpolled(name, facts.get("nvme_poll_queues"))
        for name, facts in known.items()
        if facts["io_poll"] == 0
    ]
    _polling_finding(unpolled, v)


def _unpolled(disk: str, queues: object, has: str = "has no polling") -> str:
    """``nvme0n1 has no polling (io_poll 0, NVMe poll_queues 0)``."""
    return f"{disk} {has} (io_poll 0" + (f", NVMe poll_queues {queues})" if queues is not None else ")")


def _polling_finding(unpolled: Sequence[str], v: Verdict) -> None:
    if unpolled:
        v.finding(
            "hipri-no-poll",
            f"hipri asks for polled completions, but {'; '.join(unpolled)}: the kernel completed them by interrupt",
        )


def _host_polling(p: PointView, v: Verdict) -> None:
    """``hipri-no-poll`` of a point on hosts: each target disk's io_poll there as the run started (the manifest's)."""
    unpolled = []
    for process in p.meta.processes:
        if process.host is None:
            continue
        state, why = p.run.host_setting(process.host, "nvme-poll-queues")
        if state is None:
            v.na("hipri-no-poll", why)
            continue
        detail = state.get("detail") or {}
        io_poll = detail.get("io_poll") or {}
        for name in dict.fromkeys(d for disks in process.target_disks.values() for d in disks):
            disk = name.removeprefix(f"{process.host}:")
            if io_poll.get(disk) is None:
                v.na("hipri-no-poll", f"io_poll of {name} was not kept with host {process.host}'s settings")
            elif io_poll[disk] == 0:
                queues = detail.get("poll_queues") if disk.startswith("nvme") else None
                unpolled.append(_unpolled(name, queues, "had no polling as the run started"))
    _polling_finding(unpolled, v)


def cpu_contention(p: PointView, v: Verdict) -> None:
    """``cpu-contention``: other processes took a share of the point's CPUs."""
    mean, most = p.telemetry.get("cpu_other_pct"), p.telemetry.get("cpu_other_max_pct")
    if mean is None or most is None:
        v.na(
            "cpu-contention",
            "no per-CPU share of other processes (telemetry off, or sampled before iobench kept it)",
        )
        return
    if mean >= CONTENTION_MEAN_PCT or most >= CONTENTION_ONE_CPU_PCT:
        top = p.telemetry.get("cpu_other_top")
        v.finding(
            "cpu-contention",
            f"other processes took {mean:.0f} % of the point's CPUs on average and {most:.0f} % of the busiest one"
            + (f"; the busiest of them: {top}" if top else ""),
        )


def freq_scaling(p: PointView, v: Verdict) -> None:
    """``freq-scaling``: a governor other than performance, or a clock that moved during the point."""
    before, after = p.facts("before"), p.facts("after")
    if before is None and p.hosts():
        _host_governors(p, v)
        return
    if before is None:
        v.na("freq-scaling", p.missing_facts())
        return
    cpus = before.get("cpus") or {}
    governors = {int(c): f.get("governor") for c, f in cpus.items() if f.get("governor")}
    if not governors:
        v.na("freq-scaling", "no cpufreq in sysfs: the kernel does not scale the clock here, or hides it")
        return
    parts = []
    by_governor: dict[str, list[int]] = {}
    for cpu, governor in sorted(governors.items()):
        if governor != "performance":
            by_governor.setdefault(str(governor), []).append(cpu)
    parts += [
        f"{_cpus(c)} ran the {g} governor (not performance): the clock follows the load"
        for g, c in by_governor.items()
    ]
    later = (after or {}).get("cpus") or {}
    for cpu, facts in sorted(cpus.items(), key=lambda item: int(item[0])):
        start, end = facts.get("freq_khz"), (later.get(cpu) or {}).get("freq_khz")
        if start and end and abs(end - start) / start * 100.0 >= FREQ_MOVE_PCT:
            parts.append(
                f"CPU {cpu}'s clock moved from {start / 1e6:.2f} to {end / 1e6:.2f} GHz during the point"
            )
    if parts:
        v.finding("freq-scaling", "; ".join(parts))


def _host_governors(p: PointView, v: Verdict) -> None:
    """``freq-scaling`` of a point on hosts: the governors of its CPUs there as the run started (the manifest's).

    The clock during the point is not watched on a host: that part stays NA, saying so.
    """
    cpus: dict[str, set[int] | None] = {}
    for process in p.meta.processes:
        if process.host is not None:
            # No CPU list: the point may run on any CPU of the host.
            chosen = set(parse_cpulist(process.cpus)) if process.cpus else None
            known = cpus.get(process.host, set())
            cpus[process.host] = None if chosen is None or known is None else known | chosen
    parts = []
    for host, chosen in cpus.items():
        state, why = p.run.host_setting(host, "cpu-governor")
        if state is None:
            v.na("freq-scaling", why)
            continue
        governors = (state.get("detail") or {}).get("governors")
        if not governors:
            v.na("freq-scaling", f"host {host}: {state.get('note') or 'its governors were not kept'}")
            continue
        by_governor: dict[str, list[int]] = {}
        for cpu, governor in sorted(((int(c), g) for c, g in governors.items()), key=lambda item: item[0]):
            if governor != "performance" and (chosen is None or cpu in chosen):
                by_governor.setdefault(str(governor), []).append(cpu)
        parts += [
            f"host {host}: {_cpus(c)} ran the {g} governor as the run started (not performance): the clock "
            "follows the load"
            for g, c in by_governor.items()
        ]
        v.na("freq-scaling", f"host {host}: the clock during the point is watched on this machine only")
    if parts:
        v.finding("freq-scaling", "; ".join(parts))


def throttled(p: PointView, v: Verdict) -> None:
    """``throttled``: thermal throttle counts rose, or a target disk passed its warning temperature."""
    before, after = p.facts("before"), p.facts("after")
    if before is None:
        v.na("throttled", p.missing_facts())
        return
    parts = []
    counted = False
    later = (after or {}).get("cpus") or {}
    rises: dict[tuple[str, int], list[int]] = {}
    for cpu, facts in (before.get("cpus") or {}).items():
        for kind in ("core", "package"):
            start, end = facts.get(f"{kind}_throttle"), (later.get(cpu) or {}).get(f"{kind}_throttle")
            if start is None:
                continue
            counted = True
            if end is not None and end > start:
                rises.setdefault((kind, end - start), []).append(int(cpu))
    for (kind, rise), cpus in sorted(rises.items()):
        owner = f"CPU {cpus[0]}'s" if len(cpus) == 1 else f"{_cpus(cpus)}'"
        parts.append(f"{owner} thermal throttle count ({kind}) rose by {rise} during the point")
    sensors = {**(before.get("sensors") or {})}
    hottest: dict[str, dict[str, Any]] = {}
    for phase in (before, after or {}):
        for disk, facts in (phase.get("sensors") or {}).items():
            if facts.get("temp_c") is not None and facts["temp_c"] >= hottest.get(disk, {}).get(
                "temp_c", -math.inf
            ):
                hottest[disk] = facts
    sensors.update(hottest)
    for disk, facts in sorted(sensors.items()):
        temp, warn, crit = facts.get("temp_c"), facts.get("warn_c"), facts.get("crit_c")
        if temp is None:
            continue
        if crit is not None and temp >= crit:
            parts.append(f"{disk} reached {temp:.1f} °C, past its critical mark of {crit:.1f} °C")
        elif warn is not None and temp >= warn:
            parts.append(f"{disk} reached {temp:.1f} °C, past its warning mark of {warn:.1f} °C")
    if parts:
        v.finding("throttled", "; ".join(parts))
    elif not counted and not sensors:
        v.na("throttled", "no thermal throttle counters and no temperature sensor for the targets' disks")


def _compressor(seen: Mapping[str, Any]) -> tuple[str, str] | None:
    """What in a target's stack compresses or deduplicates: (what, what it does), or None."""
    fstype, options = seen.get("fstype"), str(seen.get("fs_options") or "")
    if fstype == "btrfs":
        found = next((o for o in options.split(",") if o.startswith(("compress=", "compress-force="))), None)
        if found is not None:
            return f"btrfs mounted with {found}", "compresses"
    if fstype == "zfs":
        return (
            "ZFS, whose datasets compress and deduplicate as their properties say (not read by iobench)",
            "may compress",
        )
    for device in seen.get("stack") or []:
        name = str(device.get("name") or "")
        names = [str(device.get(k) or "").lower() for k in ("dm_name", "dm_uuid")]
        # LVM names a VDO pool's device <vg>-<pool>-vpool (uuid LVM-...-vpool); plain dm-vdo has "vdo" in it
        if any("vdo" in n or n.endswith("-vpool") for n in names):
            return f"dm-vdo ({name}: {device.get('dm_name')})", "deduplicates and compresses"
        if name.startswith("zram"):
            return f"zram ({name})", "compresses"
        if re.fullmatch(r"zd\d+", name):
            return f"a ZFS volume ({name})", "may compress"
        model = str(device.get("model") or "")
        if any(m.lower() in model.lower() for m in COMPRESSING_MODELS):
            return f"{model} ({name}), a compressing device", "compresses"
    return None


def compressible_writes(p: PointView, v: Verdict) -> None:
    """``compressible-writes``: fio's default buffers written to a stack that compresses or deduplicates."""
    if not p.meta.writes or p.options is None or p.engine == "null":
        return
    if p.flag("refill_buffers") or any(
        p.option(o) is not None for o in ("buffer_compress_percentage", "dedupe_percentage")
    ):
        return
    for target in p.targets():
        seen = p.target_facts(target)
        if seen is None:
            v.na("compressible-writes", p.missing_facts())
            return
        found = _compressor(seen)
        if found is not None:
            what, does = found
            v.finding(
                "compressible-writes",
                f"fio's default buffer contents are written to {what}, which {does} them; set refill_buffers "
                "or buffer_compress_percentage",
            )
            return
        if seen.get("fstype") is None and not seen.get("stack"):
            v.na("compressible-writes", f"{target}: neither its file system nor its devices are known")


def not_steady(p: PointView, v: Verdict) -> None:
    """``not-steady``: the frame's steady-state verdict is false."""
    steady, reason = p.telemetry.get("steady"), p.telemetry.get("steady_reason")
    if steady is False:
        v.finding("not-steady", str(reason or "the point did not settle"))
    elif steady is None:
        v.na("not-steady", str(reason or "no steady-state verdict"))


def noisy(p: PointView, v: Verdict) -> None:
    """``noisy``: the point's repeats vary by a CV of its rate above :data:`NOISY_CV` (the summary's rule)."""
    if not p.spread:
        return
    parts = []
    counts = []
    for direction, (mean, cv, half, n) in sorted(p.spread.items()):
        counts.append(n)
        if n < 2 or not math.isfinite(cv) or mean <= 0 or cv <= NOISY_CV:
            continue
        label = "IOPS" if len(p.spread) == 1 else f"{direction} IOPS"
        parts.append(
            f"{label} over {n:.0f} repeats vary by a CV of {100 * cv:.1f} % (limit {100 * NOISY_CV:g} %); "
            f"the 95 % CI of the mean is ±{100 * half / mean:.1f} % ({mean:,.0f} ± {half:,.0f})"
        )
    if parts:
        v.finding("noisy", "; ".join(parts))
    elif counts and max(counts) < 2:
        v.na("noisy", "one repeat: the spread of repeats needs 2 or more")


def host_overlap(p: PointView, v: Verdict) -> None:
    """``host-overlap``: the point's hosts ran together for less than :data:`MIN_OVERLAP_PCT` of the longest's span."""
    overlap, window = p.telemetry.get("overlap_pct"), p.telemetry.get("window_s")
    if overlap is None or window is None:
        if any(process.host is not None for process in p.meta.processes):
            v.na(
                "host-overlap",
                "when each host ran is unknown: no logs in Unix time (a run from before iobench asked for "
                "them), or a log or fio's runtime of a job missing",
            )
        return
    if overlap < MIN_OVERLAP_PCT:
        skew = p.telemetry.get("start_skew_ms")
        longest = window / overlap * 100.0 if overlap > 0 else math.nan
        v.finding(
            "host-overlap",
            f"the hosts ran together for {window:.2f} s, {overlap:.0f} % of the longest host's "
            f"{longest:.2f} s"
            + (f" (their starts {skew:,.0f} ms apart)" if skew is not None else "")
            + ": the cluster's IOPS and bandwidth cover that window only",
        )


def fell_behind(offered: float, achieved: Sequence[float], window_s: float = 1.0) -> int | None:
    """The first of :data:`BEHIND_WINDOWS` short windows in a row; None when the point kept up.

    A window is short when its IOPS are more than :data:`BEHIND_SHORT_PCT` %
    below ``offered`` and further below than Poisson arrivals stray by
    chance: :data:`BEHIND_POISSON_SD` standard deviations of the window's
    count (√(offered × window_s) I/Os).
    """
    chance = BEHIND_POISSON_SD * math.sqrt(max(offered * window_s, 0.0)) / window_s
    floor = offered * (1 - BEHIND_SHORT_PCT / 100) - chance
    run = 0
    for index, value in enumerate(achieved):
        run = run + 1 if value < floor else 0
        if run >= BEHIND_WINDOWS:
            return index - run + 1
    return None


def _short_by(offered: float, achieved: float, seconds: float) -> bool:
    """Whether ``achieved`` IOPS over ``seconds`` fall short of ``offered`` by :data:`BEHIND_SHORT_PCT` % and chance."""
    return fell_behind(offered, [achieved] * BEHIND_WINDOWS, seconds) is not None


def behind_finding(
    run: RunDir, directory: Path, meta: PointMeta, jobs: Sequence[Mapping[str, Any]] = ()
) -> str | None:
    """Why an open-loop point fell behind its offered load; None when it kept up or is closed loop.

    Its IOPS logs, window by window (:func:`fell_behind`); and, for a point
    too short for that, the whole point: fio's IOPS of ``jobs`` (the point's
    rows, with ``iops`` and ``total_ios``) over their run, short by the same
    rule with the whole run as the window.

    Raises
    ------
    IobenchError
        The point's job files or logs cannot be read.
    """
    from iobench.results.timeseries import read_run_logs  # the logs only for open-loop points

    options, problem = _options(directory, meta)
    if options is None:
        raise IobenchError(str(problem))
    rate = options.get("rate_iops")
    if rate is None:
        return None
    try:
        per_job = float(rate)
    except ValueError:
        raise IobenchError(f"rate_iops={rate} is not one number for every direction") from None
    series = read_run_logs(run, [(directory, meta)]).series
    iops = series[series["metric"].eq("iops")]
    named = {(j.get("host"), j.get("jobname"), j.get("job_index")) for j in jobs}
    count = len(iops[["host", "jobname", "job"]].drop_duplicates()) if len(iops) else len(named)
    if count == 0:
        raise IobenchError("the point has no IOPS log and no job's numbers")
    offered = per_job * count
    said = (
        f"offered {offered:,.0f} IOPS ({count} job{'s' if count != 1 else ''} × {per_job:,.0f}) but achieved"
    )
    why = "the latency leaves out the I/Os' wait for their turn"
    # fio logs no window shorter than log_avg_msec: a 1-s point may have none.
    achieved = iops.groupby("window")["value"].sum().sort_index().to_numpy(dtype=float)[:-1]
    window_s = float(options.get("log_avg_msec", DEFAULT_LOG_AVG_MSEC)) / 1000.0
    first = fell_behind(offered, achieved.tolist(), window_s)
    if first is not None:
        short = achieved[first : first + BEHIND_WINDOWS]
        windows = f"windows {first + 1}–{first + BEHIND_WINDOWS}"
        return f"{said} {', '.join(f'{x:,.0f}' for x in short)} in {windows}: {why}"
    total = sum(float(j.get("iops") or 0.0) for j in jobs)
    ios = sum(float(j.get("total_ios") or 0.0) for j in jobs)
    if total > 0 and ios > 0 and _short_by(offered, total, ios / total):
        return f"{said} {total:,.0f} over the point's {ios / total:.1f} s: {why}"
    return None


def behind(p: PointView, v: Verdict) -> None:
    """``behind``: an open-loop point fell short of the IOPS it was offered (:func:`behind_finding`)."""
    if p.option("rate_iops") is None:
        return
    try:
        found = behind_finding(RunDir.open(p.directory.parent.parent), p.directory, p.meta, p.jobs)
    except IobenchError as exc:
        v.na("behind", str(exc))
        return
    if found is not None:
        v.finding("behind", found)


def _quote(lines: Sequence[str]) -> str:
    shown = "; ".join(f'"{line}"' for line in lines[:QUOTED_LINES])
    more = len(lines) - QUOTED_LINES
    return shown + (f" (and {more} more line{'s' if more > 1 else ''})" if more > 0 else "")


#: What fio prints routinely, saying nothing is wrong: no ``fio-warning``. Each a pattern of one line
#: (after a client's ``<host>`` prefix), read from fio's sources (``log_info`` calls) and its output.
INFORMATIONAL: tuple[tuple[str, str], ...] = (
    (r"$", "a blank line"),
    (r"\.\.\.$", "the client's line for a section's further jobs"),
    (r".*: \(g=\d+\): rw=", "a job's description: NAME: (g=0): rw=..., bs=..."),
    (r"Starting \d+ (?:process|processes|thread|threads)$", "how many jobs start"),
    (r"hostname=.*, fio=", "a server's hostname and fio version, through the client"),
    (r"fio-\d[\w.\-]*$", "fio's version"),
    (
        r".*: Laying out IO files? \(",
        "fio writes a job's files before its I/O (NAME: Laying out IO file (1 file / 8MiB))",
    ),
    (r".*: Prepopulating IO file \(", "an engine fills a file before its I/O"),
    (r"fio: opendir added \d+ files$", "the files a directory target holds"),
)
_INFORMATIONAL = re.compile(r"^(?:<[^>]+>)?\s*(?:" + "|".join(f"(?:{p})" for p, _ in INFORMATIONAL) + ")")


def informational(line: str) -> bool:
    """Whether ``line`` of fio's is one of :data:`INFORMATIONAL` (routine, not a warning)."""
    return _INFORMATIONAL.match(line.strip()) is not None


def fio_warning(p: PointView, v: Verdict) -> None:
    """``fio-warning``: what fio printed on stderr, or before its results in its output file."""
    stderr = p.directory / "stderr.txt"
    try:
        text = read_text(stderr, FIO_TEXT, run_of(p.directory))
        said = [line.strip() for line in text.splitlines() if line.strip() and not informational(line)]
    except FileNotFoundError:
        v.na("fio-warning", "no stderr.txt saved with the point")
        said = []
    except OSError as exc:
        v.na("fio-warning", f"{stderr} cannot be read ({exc.strerror})")
        said = []
    before: list[str] = []
    # The fio processes of a point on hosts share one output file: read each file once.
    for output in dict.fromkeys(process.output for process in p.meta.processes):
        with contextlib.suppress(OSError):
            fd = open_regular(p.directory / output, FIO_TEXT, run_of(p.directory))
            with os.fdopen(fd, "rb") as handle:
                head = handle.read(65536).decode(errors="replace")
            start = head.find("{")
            if start > 0:
                before += [line.strip() for line in head[:start].splitlines() if not informational(line)]
    parts = []
    if said:
        parts.append(f"fio said on stderr: {_quote(said)}")
    if before:
        parts.append(f"fio said before its results: {_quote(before)}")
    if parts:
        v.finding("fio-warning", "; ".join(parts))


#: Each check's function, in :data:`CODES` order.
FUNCTIONS = (
    memory_backed,
    sparse_read,
    device_count,
    data_elsewhere,
    hipri_no_poll,
    queue_depth,
    ended_in_ramp,
    cpu_contention,
    freq_scaling,
    throttled,
    compressible_writes,
    not_steady,
    noisy,
    host_overlap,
    behind,
    fio_warning,
)


def judge(point: PointView) -> Verdict:
    """Every check on one point × repeat.

    Parameters
    ----------
    point
        The point as saved, with the frame's numbers of it.

    Returns
    -------
    Verdict
        The findings and the checks that could not run.
    """
    verdict = Verdict()
    if point.options_problem is not None:
        verdict.na(
            "page-cache",
            f"{point.options_problem}: the checks that need fio's options (page-cache, memory-backed, "
            "sparse-read, device-count, data-elsewhere, hipri-no-poll, queue-depth, ended-in-ramp, "
            "compressible-writes) were not run",
        )
    for check in FUNCTIONS:
        check(point, verdict)
    return verdict


# --- reading a point ----------------------------------------------------------------------------


def read_options(text: str) -> dict[str, str]:
    """The options of a fio job file: ``[global]``'s, then each section's over them (name → value).

    A bare option (``refill_buffers``) has the value ``""``; comments (``;``,
    ``#``) and ``filename=`` lines are left out.
    """
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith((";", "#", "[")):
            continue
        name, sep, value = line.partition("=")
        name = name.strip().lower()
        if name in ("filename", "name"):
            continue
        options[name] = value.strip() if sep else ""
    return options


def _options(directory: Path, meta: PointMeta) -> tuple[dict[str, str] | None, str | None]:
    options: dict[str, str] = {}
    for process in meta.processes:
        path = directory / process.jobfile_name
        try:
            options.update(read_options(read_text(path, FIO_TEXT, run_of(directory))))
        except OSError as exc:
            return None, f"{path.name} cannot be read ({exc.strerror})"
    return (options, None) if meta.processes else (None, "no fio process recorded")


def _value(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _firsts(
    frame: pd.DataFrame, keys: Sequence[str], columns: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per ``keys`` group, the first value of each of ``columns`` that is not NA (absent columns: None)."""
    present = [c for c in columns if c in frame]
    if not present:
        return {}
    firsts = frame[[*keys, *present]].groupby(list(keys), sort=False, dropna=True).first()
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    values = [firsts[c].tolist() for c in present]
    for index, key in enumerate(firsts.index):
        group = key if isinstance(key, tuple) else (key,)
        out[tuple(_value(k) for k in group)] = {
            c: _value(v[index]) for c, v in zip(present, values, strict=True)
        }
    return out


def with_validity(
    frame: pd.DataFrame, run: RunDir, points: Sequence[tuple[Path, PointMeta]] | None = None
) -> pd.DataFrame:
    """The tidy frame with ``validity``, ``validity_detail`` and ``validity_na`` (see the module's note).

    Parameters
    ----------
    frame
        A run's tidy frame, with its telemetry and steady-state columns.
    run
        The run directory its points are saved in.
    points
        Its point directories with their ``meta.json``, when the caller read
        them already (read here otherwise).

    Returns
    -------
    pandas.DataFrame
        A copy with the three columns (string dtype); NA on rows of points that did not finish ``ok``.
    """
    if "point" not in frame or "repeat" not in frame or frame.empty:
        return frame
    verdicts = {key: verdict.columns() for key, verdict in judge_run(frame, run, points).items()}
    keys = list(zip(frame["point"], frame["repeat"], strict=True))
    status = frame["status"] if "status" in frame else pd.Series(["ok"] * len(frame))
    out = frame.copy()
    for index, column in enumerate(VALIDITY):
        values = [
            verdicts.get((_value(p), _value(r)), (None, None, None))[index] if s == "ok" else None
            for (p, r), s in zip(keys, status, strict=True)
        ]
        out[column] = pd.array(values, dtype="string")
    return out


def judge_run(
    frame: pd.DataFrame, run: RunDir, points: Sequence[tuple[Path, PointMeta]] | None = None
) -> dict[tuple[int, int], Verdict]:
    """Every ok point × repeat of ``run`` judged: ``(point, repeat)`` → :class:`Verdict` (``points``: as :func:`with_validity`)."""
    data = frame.copy(deep=False)
    data.attrs = {}  # pandas deep-copies attrs (the machine's facts) into every frame made from this one
    rows = data[data["status"].eq("ok").fillna(False)] if "status" in data else data
    if rows.empty:
        return {}
    totals = rate_totals(rows)
    keys = ["point", "repeat", "direction"]
    fio_bw, fio_iops = (_summed(totals, keys, column) for column in ("bw_bytes", "iops"))
    dev_bw, dev_iops = device_rates(rows, keys)
    jobs = _jobs(rows)
    point_columns = (
        "cpu_other_pct",
        "cpu_other_max_pct",
        "cpu_other_top",
        "steady",
        "steady_reason",
        "window_s",
        "start_skew_ms",
        "overlap_pct",
    )
    per_point = _firsts(rows, ["point", "repeat"], point_columns)
    spread: dict[tuple[Any, ...], tuple[float, float, float, float]] = {}
    if "iops" in totals and "direction" in totals:
        stats = over_repeats(totals, ["point", "direction"], ["iops"])
        names = ("point", "direction", "iops_mean", "iops_cv", "iops_ci95", "iops_n")
        columns = [stats[c].to_numpy() for c in names]
        for point, direction, mean, cv, half, n in zip(*columns, strict=True):
            spread[(_value(point), _value(direction))] = (float(mean), float(cv), float(half), float(n))
    listed = run.point_metas() if points is None else points
    saved = {(meta.point, meta.repeat): (directory, meta) for directory, meta in listed}
    run_view = _run_view(run)
    for (point, repeat), (_, meta) in saved.items():
        wrote = fio_bw.get((point, repeat, "write"))
        if meta.writes and meta.status == "ok" and meta.started is not None:
            for target in dict.fromkeys(t for p in meta.processes for t in p.targets):
                run_view.writes.append((meta.started, target, wrote or 0.0))
    directions = sorted({d for (_, _, d) in fio_bw})
    out: dict[tuple[int, int], Verdict] = {}
    for point, repeat in dict.fromkeys(zip(rows["point"], rows["repeat"], strict=True)):
        key = (_value(point), _value(repeat))
        if key not in saved:
            continue
        directory, meta = saved[key]
        options, problem = _options(directory, meta)
        telemetry = {c: per_point.get(key, {}).get(c) for c in point_columns}
        if "steady" not in rows:
            telemetry["steady"] = None
        view = PointView(
            meta=meta,
            directory=directory,
            options=options,
            options_problem=problem,
            fio_bw={d: fio_bw[(*key, d)] for d in directions if (*key, d) in fio_bw},
            dev_bw={d: dev_bw[(*key, d)] for d in directions if (*key, d) in dev_bw},
            telemetry=telemetry,
            jobs=jobs.get(key, []),
            fio_iops={d: fio_iops[(*key, d)] for d in directions if (*key, d) in fio_iops},
            dev_iops={d: dev_iops[(*key, d)] for d in directions if (*key, d) in dev_iops},
            spread={d: spread[(key[0], d)] for d in directions if (key[0], d) in spread},
            run=run_view,
        )
        out[key] = judge(view)
    return out


def _summed(totals: pd.DataFrame, keys: list[str], column: str) -> dict[tuple[Any, ...], float]:
    """``column`` summed over each point × repeat × direction's jobs (and hosts), NA left out."""
    if column not in totals or "direction" not in totals:
        return {}
    summed = totals.groupby(keys, dropna=True)[column].sum(min_count=1).reset_index()
    return {
        (_value(point), _value(repeat), _value(direction)): float(value)
        for point, repeat, direction, value in zip(
            summed["point"], summed["repeat"], summed["direction"], summed[column], strict=True
        )
        if not pd.isna(value)
    }


def device_rates(
    rows: pd.DataFrame, keys: list[str]
) -> tuple[dict[tuple[Any, ...], float], dict[tuple[Any, ...], float]]:
    """The telemetry's device bytes/s and I/Os per second per ``keys``, over the point's hosts.

    Each host's rows carry that host's devices (NA host: this machine); their
    sum is the cluster's, as fio's totals are. A host without the figure leaves
    the key out.
    """
    if "direction" not in rows or "dev_bw_bytes" not in rows:
        return {}, {}
    split = "host" in rows
    data = rows.assign(host=rows["host"].astype("string").fillna("")) if split else rows
    firsts = _firsts(data, [*keys, "host"] if split else keys, ["dev_bw_bytes", "dev_iops"])
    out: tuple[dict[tuple[Any, ...], float], dict[tuple[Any, ...], float]] = ({}, {})
    for column, summed in zip(("dev_bw_bytes", "dev_iops"), out, strict=True):
        missing: set[tuple[Any, ...]] = set()
        for key, found in firsts.items():
            base, value = key[: len(keys)], found.get(column)
            if value is None:
                missing.add(base)
            else:
                summed[base] = summed.get(base, 0.0) + float(value)
        for base in missing:
            summed.pop(base, None)
    return out


#: The columns of each job × direction row the checks read (:attr:`PointView.jobs`).
JOB_COLUMNS = (
    "host",
    "jobname",
    "job_index",
    "direction",
    "iops",
    "total_ios",
    "io_bytes",
    "inflight",
    "lat_mean_us",
    "clat_mean_us",
)


def _jobs(rows: pd.DataFrame) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Per ``(point, repeat)``, its rows with :data:`JOB_COLUMNS` (absent columns: None)."""
    columns = [c for c in JOB_COLUMNS if c in rows]
    values = [rows[c].tolist() for c in ("point", "repeat", *columns)]
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for point, repeat, *found in zip(*values, strict=True):
        job = dict.fromkeys(JOB_COLUMNS)
        job.update({c: _value(x) for c, x in zip(columns, found, strict=True)})
        out.setdefault((_value(point), _value(repeat)), []).append(job)
    return out


def _run_view(run: RunDir) -> RunView:
    """A :class:`RunView` with each host's settings as the run started, from the manifest."""
    try:
        manifest = run.manifest()
    except IobenchError as exc:
        return RunView(hosts_problem=f"the hosts' settings cannot be read: {exc}")
    hosts = {}
    for host in manifest.hosts:
        states = [
            s for s in host.get("system") or () if isinstance(s, dict) and isinstance(s.get("name"), str)
        ]
        if states:
            hosts[str(host.get("host"))] = {s["name"]: s for s in states}
    return RunView(hosts=hosts)


def findings(frame: pd.DataFrame) -> pd.DataFrame:
    """The points × repeats with a finding: ``point``, ``repeat``, the axes that vary, ``validity``, ``validity_detail``.

    Parameters
    ----------
    frame
        A tidy frame (:func:`iobench.load`).

    Returns
    -------
    pandas.DataFrame
        One row per point × repeat whose ``validity`` is not empty, in point
        order; empty (with those columns) when there is none or the frame has
        no validity columns (a frame from ``iobench parse``).
    """
    base = ["point", "repeat"]
    if "validity" not in frame or not set(base) <= set(frame.columns):
        return pd.DataFrame(columns=[*base, "validity", "validity_detail"])
    rows = frame[frame["validity"].fillna("").ne("")].drop_duplicates(base)
    varying = [c for c in parameter_columns(frame) if frame[c].nunique(dropna=False) > 1 and c != "run_id"]
    return rows[[*base, *varying, "validity", "validity_detail"]].sort_values(base).reset_index(drop=True)
