"""Hosts over real SSH: device settings per host and their restore after a crash, placement
seen in each host's /proc, a host that dies mid-sweep. Namespace hosts: tests/netns_hosts.py.

The end-to-end checks of the issue (every point on both hosts, servers on loopback only, nothing
left, an unreachable host refused) are tests/test_hosts_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from loopdev import LoopFactory
from netns_hosts import NetnsHost, NetnsHosts

import iobench
from iobench.errors import HostLost, TargetVanished
from iobench.matrix.model import load_matrix
from iobench.planner.plans import PlannedRun
from iobench.results.loading import load
from iobench.runner.sweep import NullProgress, PointOutcome, run
from iobench.system.tuning import pending_journals, read_settings

pytestmark = [pytest.mark.root, pytest.mark.fio]


def _host(host: NetnsHost, name: str, targets: str) -> str:
    return (
        f"  - name: {name}\n    ssh: {host.ssh}\n    ssh_options: {json.dumps(list(host.ssh_options))}\n"
        f"    targets: {targets}\n"
    )


def _matrix(path: Path, hosts: str, fio: str, axes: str, extra: str = "") -> Path:
    path.write_text(
        "version: 1\nname: hosts-run\nfio:\n"
        + textwrap.indent(textwrap.dedent(fio), "  ")
        + "hosts:\n"
        + hosts
        + "matrix:\n"
        + textwrap.indent(textwrap.dedent(axes), "  ")
        + extra
    )
    return path


def _iobench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.loopdev
def test_settings_are_applied_journalled_and_restored_on_the_host(
    netns_hosts: Callable[..., NetnsHosts], loops: LoopFactory, tmp_path: Path
) -> None:
    (host,) = netns_hosts(1, names=["delta"])
    loop = loops.attach(16)
    before = dict(read_settings(loop.name))
    other = "none" if before["scheduler"] != "none" else "mq-deadline"
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        _host(host, "d", f"[{{path: {loop.path}}}]"),
        "ioengine: psync\nrw: randread\nbs: 4k\nruntime: 1\ntime_based: 1\n",
        f"scheduler: [{other}, {before['scheduler']}]\nreadahead_kb: [4096]\n",
    )
    # `plan` reads the host over SSH and changes nothing.
    planned = _iobench("plan", str(matrix), "--json")
    assert planned.returncode == 0, planned.stderr
    (first, _) = json.loads(planned.stdout)
    assert first["settings"] == {f"d:{loop.name}": {"scheduler": other, "readahead_kb": 4096}}
    assert [(p["host"], p["argv"]) for p in first["processes"]] == [
        ("d", ["--client=d", "--readonly", "job-d.fio"])
    ]
    assert dict(read_settings(loop.name)) == before

    result = run(load_matrix(matrix), out=tmp_path / "results")
    assert result.counts == {"ok": 2}
    metas = [json.loads(p.read_text()) for p in sorted(result.run_dir.glob("points/*/meta.json"))]
    assert [m["settings"][f"d:{loop.name}"] for m in metas] == [
        {"scheduler": other, "readahead_kb": 4096},
        {"scheduler": before["scheduler"], "readahead_kb": 4096},
    ]
    assert dict(read_settings(loop.name)) == before
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["settings_restored"] == {f"d:{loop.name}": before}
    assert manifest["hosts"][0]["hostname"] == "delta"
    # The host's targets are kept as a local run keeps its own (one builder: planner.plans.target_facts).
    (disk,) = manifest["hosts"][0]["targets"][0]["disks"]
    assert disk["name"] == loop.name and disk["scheduler"] == before["scheduler"]
    assert {"model", "firmware", "size_bytes", "rotational", "numa_node", "readahead_kb"} <= set(disk)
    assert result.frame is not None and set(result.frame["scheduler"]) == {other, before["scheduler"]}

    # A run killed outright leaves the host's disk changed and its journal naming the host ...
    slow = matrix.read_text().replace("runtime: 1", "runtime: 30")
    matrix.write_text(slow)
    out = tmp_path / "crashed"
    with subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/points/.*.partial/stderr.txt")) and time.monotonic() < deadline:
            if dict(read_settings(loop.name))["scheduler"] == other and list(out.glob("*/points/.*.partial")):
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert dict(read_settings(loop.name))["scheduler"] == other
    (journal,) = pending_journals()
    assert journal.host is not None and journal.host["label"] == "d" and journal.where == f"d:{loop.name}"
    # ... and `iobench restore` puts it back over SSH.
    restored = _iobench("restore")
    assert restored.returncode == 0, restored.stderr
    assert f"d:{loop.name}: restored" in restored.stdout
    assert dict(read_settings(loop.name)) == before
    assert pending_journals() == []


class KillAfter(NullProgress):
    """Kills a host (its sshd, the pid 1 of its namespace, and with it everything there) after a point."""

    def __init__(self, host: NetnsHost, key: str) -> None:
        self.host, self.key = host, key
        self.outcomes: dict[str, PointOutcome] = {}

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        self.outcomes[run.key] = outcome
        if run.key == self.key:
            assert self.host.sshd is not None
            os.killpg(self.host.sshd.pid, signal.SIGKILL)
            self.host.sshd.wait(timeout=10)


def test_placement_is_seen_per_host_and_a_dead_host_fails_only_its_points(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    alpha, bravo = netns_hosts(2, names=["echo", "foxtrot"])
    hosts = "".join(
        _host(h, name, f"[{{path: {tmp_path / name}.dat, size: 8M}}]")
        for h, name in ((alpha, "a"), (bravo, "b"))
    )
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        hosts,
        "ioengine: null\nrw: randread\nbs: 4k\nruntime: 3\ntime_based: 1\nnumjobs: 2\n",
        "host: [a, b]\nbinding: ['node:0']\n",
        "repeat: 2\n",
    )
    progress = KillAfter(bravo, "0002-r1")  # order: a r1, b r1, a r2, b r2
    with pytest.raises(HostLost) as caught:
        run(load_matrix(matrix), out=tmp_path / "results", progress=progress)

    statuses = {key: outcome.status for key, outcome in progress.outcomes.items()}
    reasons = {key: outcome.reason for key, outcome in progress.outcomes.items()}
    assert statuses == {"0001-r1": "ok", "0002-r1": "ok", "0001-r2": "ok", "0002-r2": "failed"}, reasons
    reason = progress.outcomes["0002-r2"].reason or ""
    assert "host b" in reason, reason
    # The other host's points went on; the lost connection is the environment's fault (exit 3).
    assert caught.value.exit_code == 3 and caught.value.run_dir is not None
    frame = load(caught.value.run_dir)
    ok = frame[frame["status"] == "ok"]
    assert set(ok["host"]) == {"a", "b"} and (ok["iops"] > 0).all()
    # Each host's jobs were seen in its own /proc, bound as planned (the binding is in the job file).
    assert set(ok["cpus_observed"].dropna()) and ok["cpus_observed"].notna().all()
    for meta_path in sorted(Path(caught.value.run_dir).glob("points/000?-r1/meta.json")):
        (process,) = json.loads(meta_path.read_text())["processes"]
        assert process["observed"], process
        assert all(o["policy"] and "bind:0" in o["policy"] for o in process["observed"])
    assert set(frame[frame["status"] == "failed"]["host"]) == {"b"}


# --- every promise of a run holds on hosts too ---------------------------------------------------

NULL_FIO = "ioengine: null\nrw: randread\nbs: 4k\nruntime: {runtime}\ntime_based: 1\nnumjobs: {numjobs}\n"


def test_a_second_run_against_a_locked_host_disk_is_refused(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    (host,) = netns_hosts(1, names=["golf"])
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        _host(host, "g", f"[{{path: {tmp_path / 'g.dat'}, size: 8M}}]"),
        NULL_FIO.format(runtime=4, numjobs=1),
        "iodepth: [1]\n",
    )
    out = tmp_path / "first"
    with subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as first:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/points/.*.partial")):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = _iobench("run", str(matrix), "--out", str(tmp_path / "second"))
        _, stderr = first.communicate(timeout=120)
    assert second.returncode == 2, second.stderr
    assert "host g (root@golf): another iobench run (pid" in second.stderr and "is using" in second.stderr
    assert "Traceback" not in second.stderr
    assert not (tmp_path / "second").exists() or not any((tmp_path / "second").iterdir())
    assert first.returncode == 0, stderr  # the first run was not disturbed


def test_a_hosts_target_deleted_mid_run_stops_the_run(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    (host,) = netns_hosts(1, names=["hotel"])
    target = tmp_path / "h.dat"
    target.write_bytes(b"\0" * (8 << 20))  # the null engine makes no file: the host's file is there already
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        _host(host, "h", f"[{{path: {target}, size: 8M}}]"),
        NULL_FIO.format(runtime=1, numjobs=1),
        "iodepth: [1, 2, 4]\n",
    )

    class DeleteAfterFirst(NullProgress):
        def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
            if run.key == "0001-r1":
                target.unlink()  # the host's file (its namespace shares this file system)

    with pytest.raises(TargetVanished) as caught:
        run(load_matrix(matrix), out=tmp_path / "results", progress=DeleteAfterFirst())
    fault = caught.value
    assert fault.exit_code == 3 and fault.path == str(target)
    assert str(fault).startswith("host h (root@hotel): target vanished")
    run_dir = Path(str(fault.run_dir))
    assert fault.counts == {"ok": 1} and (run_dir / "results.parquet").is_file()
    assert [s.action for s in fault.steps][:1] == ["resume"]


class KillWorker(NullProgress):
    """Kills one fio job process on the host (SIGKILL) while the chosen point runs."""

    def __init__(self, host: NetnsHost, key: str) -> None:
        self.host, self.key = host, key
        self.outcomes: dict[str, PointOutcome] = {}
        self.killed: list[int] = []
        self._thread: threading.Thread | None = None

    def point_started(self, run: PlannedRun, index: int) -> None:
        if run.key == self.key:
            self._thread = threading.Thread(target=self._kill, daemon=True)
            self._thread.start()

    def _kill(self) -> None:
        """Once both job processes have run for half a second (a worker killed while it starts makes fio
        hang instead: that is the timeout's case), kill one."""
        deadline = time.monotonic() + 30
        seen_at = None
        while time.monotonic() < deadline and not self.killed:
            fio = {p: _parent(p) for p in self.host.pids() if _comm(p) == "fio"}
            # A job process: three fio below the server (its connection, the backend, the job).
            jobs = [p for p, pp in fio.items() if pp in fio and fio[pp] in fio and fio[fio[pp]] in fio]
            if len(jobs) >= 2:
                seen_at = seen_at or time.monotonic()
                if time.monotonic() - seen_at > 0.5:
                    os.kill(jobs[0], signal.SIGKILL)
                    self.killed.append(jobs[0])
            time.sleep(0.05)

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        self.outcomes[run.key] = outcome
        if self._thread is not None:
            self._thread.join(timeout=30)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def test_a_hosts_killed_fio_worker_fails_its_point_and_the_sweep_goes_on(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    (host,) = netns_hosts(1, names=["india"])
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        _host(host, "i", f"[{{path: {tmp_path / 'i.dat'}, size: 8M}}]"),
        NULL_FIO.format(runtime=3, numjobs=2),
        "iodepth: [1, 2]\n",
    )
    progress = KillWorker(host, "0001-r1")
    result = run(load_matrix(matrix), out=tmp_path / "results", progress=progress)
    assert progress.killed, "no fio worker was found on the host to kill"
    first, second = progress.outcomes["0001-r1"], progress.outcomes["0002-r1"]
    assert first.status == "failed", first
    assert first.reason is not None and "host i: fio worker" in first.reason
    assert "killed by signal 9" in first.reason, first.reason
    assert second.status == "ok", second
    assert result.exit_code == 1 and result.counts == {"failed": 1, "ok": 1}


def test_every_hosts_counters_are_sampled_there_and_summarized_per_host(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    juliet, kilo = netns_hosts(2, names=["juliet", "kilo"])
    hosts = "".join(
        _host(h, name, f"[{{path: {tmp_path / name}.dat, size: 8M}}]")
        for h, name in ((juliet, "j"), (kilo, "k"))
    )
    matrix = _matrix(
        tmp_path / "matrix.yaml",
        hosts,
        "ioengine: psync\nrw: randread\nbs: 4k\nruntime: 2\ntime_based: 1\n",
        "iodepth: [1]\n",
        "telemetry: {interval: 0.25}\n",
    )
    result = run(load_matrix(matrix), out=tmp_path / "results")
    assert result.counts == {"ok": 1}
    frame = result.frame
    assert frame is not None and set(frame["host"]) == {"j", "k"}
    for host, rows in frame.groupby("host"):
        assert rows["cpu_busy_pct"].notna().all(), host
        assert rows["top_thread"].notna().all() and rows["bottleneck"].notna().all(), host
        assert not rows["bottleneck_reason"].fillna("").str.contains("telemetry: false").any()
    samples = iobench.telemetry(result.run_dir)
    assert set(samples["host"].dropna()) == {"j", "k"}
    for host in ("j", "k"):
        mine = samples[samples["host"] == host]
        assert {"cpu", "thread", "mem"} <= set(mine["source"]), (host, set(mine["source"]))
        assert mine[mine["source"] == "thread"]["entity"].str.startswith("fio").any()
        assert mine["t_s"].nunique() >= 4  # every 0.25 s over 2 s
    assert sorted(p.name for p in result.run_dir.glob("points/0001-r1/telemetry*")) == [
        "telemetry@j.parquet",
        "telemetry@k.parquet",
    ]
