"""The machine and software a run happened on, saved with every result (SPEC §6)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from typing import Any

from iobench import __version__
from iobench.hostfs import SystemRoot
from iobench.planner import Plan
from iobench.process import CommandNotFound, run_process


def _numactl_version() -> str | None:
    try:
        done = run_process(["numactl", "--show"], timeout=10)
    except (CommandNotFound, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    try:
        package = run_process(["dpkg-query", "-W", "-f=${Version}", "numactl"], timeout=10)
    except CommandNotFound:
        return "installed"
    return package.stdout.strip() or "installed"


def collect_metadata(plan: Plan) -> dict[str, Any]:
    """Host, kernel, CPU, software versions, topology and each target's device facts."""
    uname = platform.uname()
    targets = []
    for target in plan.matrix.targets:
        location = plan.locations[target.path]
        disks = []
        for name in location.disks:
            device = plan.topology.device(name)
            if device is not None:
                disks.append(
                    {
                        "name": device.name,
                        "model": device.model,
                        "size_bytes": device.size_bytes,
                        "rotational": device.rotational,
                        "numa_node": device.numa_node,
                        "scheduler": device.scheduler,
                        "readahead_kb": device.readahead_kb,
                    }
                )
        targets.append(
            {
                "path": target.path,
                "section": target.section,
                "kind": location.kind,
                "device": location.device,
                "home_node": location.home_node if location.home_node is not None else target.home_node,
                "size": target.size,
                "allow_write": target.allow_write,
                "disks": disks,
            }
        )
    return {
        "host": socket.gethostname(),
        "kernel": uname.release,
        "os": f"{uname.system} {uname.version}",
        "machine": uname.machine,
        "cpu_model": SystemRoot().cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "iobench_version": __version__,
        "fio_version": plan.matrix.fio_version,
        "fio_binary": plan.matrix.fio_binary,
        "numactl_version": _numactl_version(),
        "topology": plan.topology.to_dict(),
        "targets": targets,
    }
