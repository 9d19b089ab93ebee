"""What the lab must show, read from what came back (``lab.json`` and the run directories).

Placement is judged from ``cpus_observed`` (what /proc showed each fio worker
was allowed), never from the plan. Each check is a function returning a
:class:`Check`; :func:`run_checks` runs them all and never raises.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import iobench
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.system.cpulist import parse_cpulist
from iobench.system.pcie import link_bandwidth
from lab.machine import SLOW_PORT_LINK


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


class Lab:
    """The guest's facts and frames, loaded once."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.facts: dict[str, Any] = json.loads((out / "lab.json").read_text())
        topology = self.facts.get("topology") or {}
        self.node_cpus: dict[int, set[int]] = {
            int(n["id"]): set(n["cpus"]) for n in topology.get("nodes", [])
        }
        self.cores = [set(c["cpus"]) for c in topology.get("cores", [])]
        self.devices: dict[str, dict[str, Any]] = {d["name"]: d for d in topology.get("devices", [])}
        self.disks: dict[str, str] = self.facts.get("disks") or {}
        self.disk_node = {
            dev: self.devices[Path(dev).name]["numa_node"]
            for dev in self.disks.values()
            if Path(dev).name in self.devices
        }
        self._frames: dict[str, pd.DataFrame] = {}

    def frame(self, sweep: str) -> pd.DataFrame:
        if sweep not in self._frames:
            run = self.facts["runs"][sweep]
            if "run_dir" not in run:
                raise CheckFailed(f"sweep {sweep} did not run: {run.get('error')}")
            self._frames[sweep] = iobench.load(self.out / run["run_dir"])
        return self._frames[sweep]

    def metas(self, sweep: str) -> list[PointMeta]:
        run = RunDir.open(self.out / self.facts["runs"][sweep]["run_dir"])
        return [meta for _, meta in run.point_metas()]

    def other_node(self, node: int) -> int:
        return next(n for n in self.node_cpus if n != node)

    def device(self, key: str) -> dict[str, Any]:
        """The topology's entry for the lab disk ``key`` (``slow``, ``shared-a``, …)."""
        name = Path(self.disks[key]).name
        _require(name in self.devices, f"{key} ({name}) is not in the guest's topology")
        return self.devices[name]


class CheckFailed(Exception):
    """What the lab showed contradicts what it must show."""


def _require(condition: object, message: object) -> None:
    if not condition:
        raise CheckFailed(str(message))


def _cpus(text: object) -> set[int]:
    return set(parse_cpulist(str(text)))


def _ok_rows(frame: pd.DataFrame, **equal: object) -> pd.DataFrame:
    rows = frame[frame["status"] == "ok"]
    for column, value in equal.items():
        rows = rows[rows[column] == value]
    if rows.empty:
        raise CheckFailed(f"no ok rows with {equal}")
    return rows


def topology_is_two_sockets_smt2(lab: Lab) -> str:
    topology = lab.facts["topology"]
    nodes = {n["id"]: (n["cpus"], n["distances"]) for n in topology["nodes"]}
    _require(nodes == {0: ([0, 1, 2, 3], [10, 21]), 1: ([4, 5, 6, 7], [21, 10])}, nodes)
    _require(sorted(len(c) for c in lab.cores) == [2, 2, 2, 2], lab.cores)
    homes = {key: lab.disk_node.get(dev) for key, dev in lab.disks.items()}
    wanted = {"node0": 0, "node1": 1, "nonode": None, "slow": None, "shared-a": 1, "shared-b": 1}
    _require(homes == wanted, homes)
    return f"2 nodes × 2 cores × 2 threads; NVMe homes {lab.disk_node}"


def every_sweep_finished(lab: Lab) -> str:
    runs = lab.facts.get("runs") or {}
    _require("error" not in lab.facts, lab.facts.get("error"))
    bad = {name: r for name, r in runs.items() if r.get("exit_code") != 0}
    _require(runs and not bad, bad)
    return ", ".join(f"{name}: {r['counts']}" for name, r in runs.items())


def _placed_on(lab: Lab, sweep: str, binding: str, node_of: Callable[[int], int]) -> str:
    rows = _ok_rows(lab.frame(sweep), binding=binding)
    seen = []
    for row in rows.itertuples():
        home = lab.disk_node.get(str(row.target))
        _require(home is not None, f"{row.target} has no NUMA node in the guest")
        want = node_of(int(str(home)))
        cpus = _cpus(row.cpus_observed)
        _require(
            cpus and cpus <= lab.node_cpus[want],
            (f"{row.target} point {row.point} ({binding}) ran on CPUs {row.cpus_observed}, not node {want}"),
        )
        seen.append(f"{Path(str(row.target)).name}→{row.cpus_observed}")
    return f"{len(rows)} rows: " + ", ".join(sorted(set(seen)))


def local_rows_ran_on_the_disks_node(lab: Lab) -> str:
    return _placed_on(lab, "numa", "local", lambda home: home)


def remote_rows_ran_on_the_other_node(lab: Lab) -> str:
    return _placed_on(lab, "numa", "remote", lab.other_node)


def unbound_rows_could_use_every_cpu(lab: Lab) -> str:
    rows = _ok_rows(lab.frame("numa"), binding="none")
    every = set().union(*lab.node_cpus.values())
    wrong = rows[[_cpus(c) != every for c in rows["cpus_observed"]]]
    _require(wrong.empty, wrong[["point", "target", "cpus_observed"]].to_string())
    return f"{len(rows)} rows allowed CPUs {sorted(every)}"


def every_fio_worker_was_observed(lab: Lab) -> str:
    counted = 0
    for sweep in ("numa", "smt"):
        for meta in lab.metas(sweep):
            for process in meta.processes:
                workers = [o for o in process.observed if not o.leader]
                jobs = int(meta.params.get("numjobs", 1) if sweep == "smt" else 2)
                _require(
                    len(workers) == jobs,
                    (f"{sweep} {meta.key}: saw {len(workers)} of {jobs} workers of {process.targets}"),
                )
                counted += len(workers)
    return f"{counted} workers seen in /proc while they ran"


def _point_cpus(rows: pd.DataFrame) -> list[list[int]]:
    """Per point × repeat, each job's single observed CPU."""
    per_point = []
    for _, group in rows.groupby(["point", "repeat"]):
        cpus = [_cpus(c) for c in group.sort_values("job_index")["cpus_observed"]]
        _require(all(len(c) == 1 for c in cpus), f"jobs not pinned to one thread: {cpus}")
        per_point.append([next(iter(c)) for c in cpus])
    return per_point


def same_core_jobs_ran_on_sibling_threads(lab: Lab) -> str:
    points = _point_cpus(_ok_rows(lab.frame("smt"), placement="same-core", numjobs=2))
    for cpus in points:
        _require(
            len(set(cpus)) == 2 and any(set(cpus) <= core for core in lab.cores),
            (f"same-core jobs on CPUs {cpus}, not two threads of one core {lab.cores}"),
        )
    return f"{len(points)} points on threads {points}"


def diff_cores_jobs_ran_on_distinct_cores(lab: Lab) -> str:
    points = _point_cpus(_ok_rows(lab.frame("smt"), placement="diff-cores", numjobs=2))
    for cpus in points:
        cores = {next(i for i, core in enumerate(lab.cores) if cpu in core) for cpu in cpus}
        _require(len(cores) == len(cpus), f"diff-cores jobs on CPUs {cpus} share a core")
    return f"{len(points)} points on threads {points}"


def settings_applied_during_each_point(lab: Lab) -> str:
    rows = _ok_rows(lab.frame("settings"))
    for setting in ("scheduler", "readahead_kb"):
        applied = rows[setting].astype(str)
        _require(applied.notna().all() and (applied != "<NA>").all(), f"{setting} not recorded")
    combos = sorted({(r.scheduler, int(str(r.readahead_kb))) for r in rows.itertuples()})
    _require(combos == [("mq-deadline", 128), ("mq-deadline", 1024), ("none", 128), ("none", 1024)], combos)
    return f"read back per point: {combos}"


def settings_back_to_their_originals(lab: Lab) -> str:
    before, after = lab.facts["settings_before"], lab.facts["settings_after"]
    _require(before == after, f"before {before}, after {after}")
    return f"after the sweeps: {after}"


def unknown_home_skips_local_and_remote(lab: Lab) -> str:
    frame = lab.frame("unknown-home")
    statuses = frame.groupby("binding")["status"].first().to_dict()
    _require(statuses == {"local": "skipped", "remote": "skipped", "none": "ok"}, statuses)
    reasons = set(frame.loc[frame["status"] == "skipped", "reason"])
    _require(all("home NUMA node unknown" in str(r) for r in reasons), reasons)
    return f"{statuses}; reason: {next(iter(reasons))}"


def given_home_node_places_local_and_remote(lab: Lab) -> str:
    frame = lab.frame("home-node")
    local = _ok_rows(frame, binding="local")["cpus_observed"]
    remote = _ok_rows(frame, binding="remote")["cpus_observed"]
    _require(all(_cpus(c) <= lab.node_cpus[1] for c in local), list(local))
    _require(all(_cpus(c) <= lab.node_cpus[0] for c in remote), list(remote))
    return f"home_node 1: local on {set(local)}, remote on {set(remote)}"


def _hops(device: dict[str, Any]) -> list[dict[str, Any]]:
    pcie: dict[str, Any] = device.get("pcie") or {}
    _require(pcie, f"{device['name']} has no PCIe placement")
    return list(pcie["hops"])


def slowed_root_port_is_read_and_judged(lab: Lab) -> str:
    """The slow disk's root port reports the x-speed/x-width QEMU was given; the judgement matches the link.

    QEMU's emulated NVMe reports 2.5 GT/s x1 as both its maximum and its
    current link, so the port's lower maximum cannot degrade it: the port is
    below its own maximum (a note), and no lab disk may get a link warning.
    """
    slow = lab.device("slow")
    port, *_, own = _hops(slow)
    speed, width = float(SLOW_PORT_LINK[0]), int(SLOW_PORT_LINK[1])
    _require(port["role"] == "root-port" and slow["root_port"] == port["address"], port)
    _require((port["link"]["max_speed"], port["link"]["max_width"]) == (speed, width), port)
    _require((port["link"]["current_speed"], port["link"]["current_width"]) == (2.5, 1), port)
    _require(own["role"] == "device" and own["address"] == slow["pci_path"][-1], own)
    _require(slow["link"]["max_speed"] == 2.5 and slow["link"]["max_width"] == 1, slow["link"])
    expected = link_bandwidth(2.5, 1)
    _require(
        slow["pcie"]["link_bw_bytes"] == expected,
        f"link_bw_bytes {slow['pcie']['link_bw_bytes']} != {expected}",
    )
    topology = lab.facts["topology"]
    notes = [n for n in topology["notes"] if n["where"] == port["address"]]
    _require(
        [(n["kind"], n["devices"]) for n in notes] == [("port-below-max", [slow["name"]])],
        f"notes for {port['address']}: {notes}",
    )
    lab_names = {Path(dev).name for dev in lab.disks.values()}
    wrong = [w for w in topology["warnings"] if set(w["devices"]) & lab_names]
    _require(not wrong, f"link warnings for emulated NVMe at their maximum: {wrong}")
    return (
        f"{slow['name']}: root port {port['address']} at {port['link']['current_speed']:g} GT/s "
        f"x{port['link']['current_width']} of its {speed:g} GT/s x{width}; NVMe 2.5 GT/s x1 of 2.5 GT/s x1, "
        f"link_bw_bytes {expected:.0f}; note: {notes[0]['message']}"
    )


def shared_root_port_is_found(lab: Lab) -> str:
    topology = lab.facts["topology"]
    a, b = lab.device("shared-a"), lab.device("shared-b")
    names = sorted([a["name"], b["name"]])
    shared = [s for s in topology["shared_root_ports"] if s["devices"] == names]
    _require(len(shared) == 1, f"shared root ports {topology['shared_root_ports']}, wanted one with {names}")
    port = shared[0]["root_port"]
    for device in (a, b):
        _require(device["root_port"] == port and len(device["pci_path"]) == 4, device["pci_path"])
    _require(a["pci_path"][:2] == b["pci_path"][:2] and a["pci_path"][2] != b["pci_path"][2], (a, b))
    node0, node1 = lab.device("node0"), lab.device("node1")
    _require(node0["root_port"] != node1["root_port"], (node0["root_port"], node1["root_port"]))
    runs = lab.facts["runs"]
    warned = [(w["kind"], w["devices"], w["where"]) for w in runs["shared"].get("warnings", [])]
    _require(warned == [("shared-root-port", names, port)], f"the shared sweep warned {warned}")
    numa = [w for w in runs["numa"].get("warnings", []) if w["kind"] == "shared-root-port"]
    _require(not numa, f"the numa sweep (a disk per node) warned {numa}")
    return (
        f"{', '.join(names)} under root port {port} (switch {a['pci_path'][1]}); "
        f"`run` warned: {runs['shared']['warnings'][0]['message']}"
    )


def guard_refused_and_disk_unchanged(lab: Lab) -> str:
    guard = lab.facts["guard"]
    for case, words in (("mounted", "mounted"), ("unmounted", "--allow-write")):
        attempt = guard[case]
        _require(attempt.get("refused") == "SafetyError" and attempt.get("exit_code") == 2, attempt)
        _require(words in attempt["message"], attempt["message"])
        _require(attempt["hash_before"] == attempt["hash_after"], f"{case}: the disk changed")
    _require(guard["mounted"]["file_intact"], "the file on the guarded filesystem changed")
    return f"{guard['disk']}: refused mounted and unmounted; first 64 MiB unchanged; file intact"


CHECKS: tuple[Callable[[Lab], str], ...] = (
    topology_is_two_sockets_smt2,
    every_sweep_finished,
    local_rows_ran_on_the_disks_node,
    remote_rows_ran_on_the_other_node,
    unbound_rows_could_use_every_cpu,
    every_fio_worker_was_observed,
    same_core_jobs_ran_on_sibling_threads,
    diff_cores_jobs_ran_on_distinct_cores,
    settings_applied_during_each_point,
    settings_back_to_their_originals,
    unknown_home_skips_local_and_remote,
    given_home_node_places_local_and_remote,
    slowed_root_port_is_read_and_judged,
    shared_root_port_is_found,
    guard_refused_and_disk_unchanged,
)


def run_checks(out: Path) -> list[Check]:
    """Every check against the lab output in ``out``; a check that cannot run fails with the reason."""
    try:
        lab = Lab(out)
    except (OSError, ValueError) as exc:
        log = out / "guest.log"
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else "(no guest.log: see console.log)"
        return [Check("guest reported", False, f"no usable lab.json in {out}: {exc}\nguest.log:\n{tail}")]
    results = []
    for check in CHECKS:
        name = check.__name__.replace("_", " ")
        try:
            results.append(Check(name, True, check(lab)))
        except CheckFailed as exc:
            results.append(Check(name, False, str(exc)))
        except Exception as exc:  # a broken output must read as a failed check, not a crash
            results.append(
                Check(name, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            )
    return results
