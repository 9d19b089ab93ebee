"""Inside the lab guest: run the sweeps through the library, record what the checks need.

``python -m lab.guest OUT`` (started by ``guest.sh``) writes to ``OUT``:

- ``runs/<name>-<stamp>/``: one iobench run directory per matrix in ``matrices/``;
- ``lab.json``: the guest's topology (with its PCIe placement), which NVMe is
  which (by serial), each disk's settings before and after the sweeps, each
  run's directory, counts, plan warnings or error, and the guard experiment's
  outcome with the disk's hashes.

One Python process runs everything: under emulation, importing pandas alone
takes half a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import iobench
from iobench.system.hostfs import SystemRoot
from iobench.system.topology import Topology
from iobench.system.tuning import read_settings, write_setting
from lab.machine import DISKS

MATRICES = Path(__file__).resolve().parent / "matrices"
SWEEPS = ("numa", "smt", "settings", "unknown-home", "home-node", "shared")
# The node-0 disk starts from settings no sweep uses, so "restored" cannot pass by accident.
START_SETTINGS: dict[str, str | int] = {"scheduler": "kyber", "readahead_kb": 256}
GUARD_MOUNT = Path("/mnt/guard")
HASHED_BYTES = 64 << 20  # the guard matrix writes `size: 64M` from offset 0
PRECIOUS = "data a benchmark must never destroy\n"


def lab_disks(topology: Topology) -> dict[str, str]:
    """``node0``, ``node1``, ``nonode``, ``slow``, ``shared-a``, ``shared-b`` → /dev path, by serial, not by name."""
    system = SystemRoot()
    disks = {}
    for device in topology.devices:
        serial = system.read_text(f"sys/block/{device.name}/device/serial")
        if device.name.startswith("nvme") and serial in DISKS:
            disks[serial.removeprefix("lab-")] = f"/dev/{device.name}"
    return disks


def disk_settings(disks: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {key: dict(read_settings(Path(dev).name)) for key, dev in disks.items()}


def run_sweep(name: str, runs: Path) -> dict[str, Any]:
    started = time.monotonic()
    try:
        matrix = iobench.load_matrix(MATRICES / f"{name}.yaml")
        result = iobench.run(matrix, out=runs)
    except iobench.IobenchError as exc:
        return {"error": str(exc), "error_type": type(exc).__name__}
    return {
        "run_dir": str(result.run_dir.relative_to(runs.parent)),
        "counts": result.counts,
        "exit_code": result.exit_code,
        "seconds": round(time.monotonic() - started, 1),
        "warnings": [warning.to_dict() for warning in result.plan.warnings],
    }


def disk_hash(disk: str) -> str:
    digest = hashlib.sha256()
    with open(disk, "rb") as handle:
        digest.update(handle.read(HASHED_BYTES))
    return digest.hexdigest()


def guard_attempt(disk: str, allow_write: tuple[str, ...]) -> dict[str, Any]:
    """Aim the write matrix at ``disk``; iobench must refuse with a SafetyError before running."""
    before = disk_hash(disk)
    outcome: dict[str, Any] = {"allow_write": list(allow_write)}
    try:
        matrix = iobench.load_matrix(MATRICES / "guard.yaml", allow_write=allow_write)
        result = iobench.run(matrix, out=Path("/tmp/guard-runs"))
        outcome["ran"] = result.counts
    except iobench.IobenchError as exc:
        outcome.update(refused=type(exc).__name__, message=str(exc), exit_code=exc.exit_code)
    outcome["hash_before"], outcome["hash_after"] = before, disk_hash(disk)
    return outcome


def guard(disk: str) -> dict[str, Any]:
    """An ext4 filesystem on ``disk``: refused while mounted (even allowed), and unmounted unless allowed.

    While the write is attempted the filesystem is mounted read-only without
    journal replay, so nothing but iobench could change the disk's bytes.
    """
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", "guarded", "-E", "lazy_itable_init=0,lazy_journal_init=0", disk],
        check=True,
    )
    GUARD_MOUNT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", disk, str(GUARD_MOUNT)], check=True)
    (GUARD_MOUNT / "precious.txt").write_text(PRECIOUS)
    subprocess.run(["umount", str(GUARD_MOUNT)], check=True)
    subprocess.run(["mount", "-o", "ro,noload", disk, str(GUARD_MOUNT)], check=True)
    mounted = guard_attempt(disk, allow_write=(disk,))
    mounted["file_intact"] = (GUARD_MOUNT / "precious.txt").read_text() == PRECIOUS
    subprocess.run(["umount", str(GUARD_MOUNT)], check=True)
    unmounted = guard_attempt(disk, allow_write=())
    return {"disk": disk, "mounted": mounted, "unmounted": unmounted}


def main(out: Path) -> int:
    facts: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    report = out / "lab.json"

    def save() -> None:
        report.write_text(json.dumps(facts, indent=2, default=str) + "\n")

    try:
        topology = iobench.discover_topology()
        facts["topology"] = topology.to_dict()
        disks = lab_disks(topology)
        facts["disks"] = disks
        wanted = {serial.removeprefix("lab-") for serial in DISKS}
        if set(disks) != wanted:
            facts["error"] = f"expected the NVMe {sorted(wanted)} (by serial); found {disks}"
            return 1
        for key, dev in disks.items():
            os.environ[f"IOBENCH_LAB_DISK_{key.upper().replace('-', '_')}"] = dev
        for name, value in START_SETTINGS.items():
            write_setting(Path(disks["node0"]).name, name, value)
        facts["settings_before"] = disk_settings(disks)
        save()
        facts["runs"] = {}
        for name in SWEEPS:
            facts["runs"][name] = run_sweep(name, out / "runs")
            save()
        facts["settings_after"] = disk_settings(disks)
        facts["guard"] = guard(disks["nonode"])
        return 0
    except Exception:
        facts["error"] = traceback.format_exc()
        return 1
    finally:
        facts["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        save()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
