"""What /proc shows about a running fio: which CPUs and memory nodes each process may use."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from iobench.cpulist import format_cpulist, parse_cpulist


@dataclass(frozen=True)
class Observed:
    """One process of fio's group, as /proc showed it."""

    pid: int
    comm: str
    cpus: tuple[int, ...]
    mems: str | None


def _pgrp(stat: str) -> int | None:
    # comm may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = stat.rpartition(")")[2].split()
    return int(fields[2]) if len(fields) > 2 else None


def observe_group(pgid: int, proc: str = "/proc") -> list[Observed]:
    """Every live process of group ``pgid`` with its allowed CPUs and memory nodes."""
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        base = Path(proc) / entry
        try:
            if _pgrp((base / "stat").read_text()) != pgid:
                continue
            status = (base / "status").read_text()
        except (OSError, ValueError, IndexError):
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        cpus = parse_cpulist(fields.get("Cpus_allowed_list", "").strip())
        found.append(
            Observed(
                pid=int(entry),
                comm=fields.get("Name", "").strip(),
                cpus=cpus,
                mems=fields.get("Mems_allowed_list", "").strip() or None,
            )
        )
    return found


class GroupWatcher:
    """Polled while fio runs; keeps the last view of each fio process it saw."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.seen: dict[int, Observed] = {}

    def __call__(self, pgid: int) -> None:
        """Look at group ``pgid`` once."""
        for item in observe_group(pgid, self.proc):
            if item.comm.startswith("fio"):
                self.seen[item.pid] = item

    def cpus(self) -> str | None:
        """Union of the CPUs any fio process was allowed, as a cpulist; None if none was seen."""
        if not self.seen:
            return None
        return format_cpulist(tuple(sorted({c for item in self.seen.values() for c in item.cpus})))

    def to_json(self) -> list[dict[str, object]]:
        """The per-process observations, in pid order (fio forks its jobs in order)."""
        return [
            {"pid": o.pid, "comm": o.comm, "cpus": format_cpulist(o.cpus), "mems": o.mems}
            for o in sorted(self.seen.values(), key=lambda o: o.pid)
        ]
