"""The machine and software a run happened on, saved with every result."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from typing import Any

from iobench.store.answers import recall, remember
from iobench.system import procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.process import CommandNotFound, run_process
from iobench.system.stability import show
from iobench.system.topology import Topology
from iobench.version import __version__


def _numactl_version() -> str | None:
    """numactl's package version ("installed" off Debian), None when it does not work; remembered per binary."""
    binary = shutil.which("numactl")
    if binary is None:
        return None
    known = recall(binary, "numactl-version")
    if isinstance(known, str):
        return known
    try:
        done = run_process([binary, "--show"], timeout=10)
    except (CommandNotFound, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None  # not remembered: it may work next time (a container's policy, a cgroup)
    try:
        package = run_process(["dpkg-query", "-W", "-f=${Version}", "numactl"], timeout=10)
        version = package.stdout.strip() or "installed"
    except CommandNotFound:
        version = "installed"
    remember(binary, "numactl-version", version)
    return version


def _memory_gib() -> int | None:
    """The machine's memory in whole GiB: a hardware fact that a kernel's own reservations (a few
    MiB of MemTotal) do not move, so a history keys the same machine the same over reboots."""
    total = (procfs.meminfo(SystemRoot()) or {}).get("MemTotal")
    return round(total / 2**30) if total else None


def collect_metadata(
    topology: Topology, targets: list[dict[str, Any]], *, fio_version: str | None, fio_binary: str
) -> dict[str, Any]:
    """Host, kernel, CPU, software versions, ``topology``, the targets' facts as the planner found them,
    and the machine's settings that make numbers unstable (``system``: ``iobench system show``)."""
    uname = platform.uname()
    disks = dict.fromkeys(str(d.get("name")) for t in targets for d in t.get("disks") or () if d.get("name"))
    return {
        "host": socket.gethostname(),
        "kernel": uname.release,
        "os": f"{uname.system} {uname.version}",
        "machine": uname.machine,
        "cpu_model": procfs.cpu_model(SystemRoot()),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "iobench_version": __version__,
        "fio_version": fio_version,
        "fio_binary": fio_binary,
        "numactl_version": _numactl_version(),
        "topology": topology.to_dict(),
        "targets": targets,
        "system": [state.to_json() for state in show(SystemRoot(), tuple(disks))],
    }
