"""What driving N hosts costs: this machine's CPU, each host's CPU against plain fio, wall time.

Creates test hosts on this machine (network namespaces with their own sshd:
tests/netns_hosts.py; needs root and openssh-server), then runs the same short
sweep (null engine, rate-limited so the hosts' fio servers stay light on a small
machine; POINTS points of 1 s; every point on all hosts at once) through the
library in a fresh process (as ``iobench run`` does) with ``hosts:`` naming 1,
then N of them; then the same job files as plain ``fio --client`` on plain
servers of the same hosts, point after point.

Measured, each as the median of the rounds:

- *setup*: from the process's start to the first point's start (connect, check,
  snapshot, plan, lock, start servers, the run directory); *teardown*: from the
  last point's end to the process's exit;
- *point spacing*: the median time between two points' starts, against plain
  ``fio --client``'s time for one point (its wall, point after point);
- *iobench CPU a point*: the iobench process's own CPU (every thread) while the
  points ran, divided by the points; *fio client CPU a point*: its children's
  (the fio client) over the same span; *iobench CPU, setup and teardown*: the rest;
- *memory, descriptors, threads*: the iobench process's RSS, open file
  descriptors and threads at the end of its busiest point;
- *hosts' CPU a point*: every process under the hosts' sshd listeners (sessions,
  agents, fio servers and their jobs; running ones from /proc, ended ones from
  their parents' reaped-children times) while the points ran, per host and per
  point, for iobench and for plain fio on the same hosts: the difference is what
  iobench adds on each host.

Each run is started by a small reaper process (PR_SET_CHILD_SUBREAPER), so that
whatever it leaves running (a detached control master, say) is found, counted as
a failure and stopped.

    .venv/bin/python benchmarks/hosts_cost.py [--hosts 1 8 32] [--rounds 3] [--markdown]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from netns_hosts import NetnsHost, NetnsHosts, children_of, netns_hosts  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
CLK_TCK = os.sysconf("SC_CLK_TCK")
RUN_TIMEOUT_S = 600.0

MATRIX = """\
version: 1
name: hosts-cost
fio:
  ioengine: "null"
  rw: randread
  runtime: 1
  time_based: 1
  rate_iops: 2000
matrix:
  bs: [4k, 64k]
  iodepth: [1, 4]
"""
POINTS = 4


def matrix_text(hosts: list[NetnsHost], base: Path) -> str:
    if not hosts:
        return MATRIX + f"targets:\n  - path: {base / 'local.dat'}\n    size: 16M\n"
    lines = ["hosts:"]
    for host in hosts:
        lines += [
            f"  - name: {host.name}",
            f"    ssh: {host.ssh}",
            f"    ssh_options: {json.dumps(list(host.ssh_options))}",
            f"    targets: [{{path: {base / (host.name + '.dat')}, size: 16M}}]",
        ]
    return MATRIX + "\n".join(lines) + "\n"


def _stat_times(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user+system seconds of ``pid`` from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def tree_cpu(roots: list[int]) -> tuple[float, float]:
    """CPU seconds under ``roots`` (theirs included), running and reaped: (fio's, everything else's).

    fio's is every process from a ``fio`` down (the servers and their jobs):
    what fio itself costs. The rest is the sessions, shells and sshd: what
    reaching the host costs.
    """
    fio = other = 0.0
    stack = [(pid, False) for pid in roots]
    while stack:
        pid, under_fio = stack.pop()
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:  # ended meanwhile: its parent's reaped-children time has it
            continue
        is_fio = under_fio or text[text.index("(") + 1 : text.rindex(")")].startswith("fio")
        fields = text.rpartition(")")[2].split()
        own, reaped = (
            sum(int(f) for f in fields[11:13]) / CLK_TCK,
            sum(int(f) for f in fields[13:15]) / CLK_TCK,
        )
        # A shell's reaped children are its programs; a fio's are its jobs.
        if is_fio:
            fio += own + reaped
        else:
            other += own + reaped
        stack += [(int(c), is_fio) for c in children]
    return fio, other


class Others:
    """How many CPUs other processes (and steal) took meanwhile: the machine's busy time less this run's own."""

    def __init__(self, listeners: list[int]) -> None:
        self.listeners = listeners
        self.start = (self._busy(), self._ours(), time.perf_counter())

    @staticmethod
    def _busy() -> float:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:9]]  # user ... steal
        return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK

    def _ours(self) -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime + time.process_time() + sum(tree_cpu(self.listeners))

    def cpus(self) -> float:
        busy, ours, started = self.start
        taken = (self._busy() - busy) - (self._ours() - ours)
        return max(taken, 0.0) / (time.perf_counter() - started)


def reaper(argv: list[str], out: Path) -> dict[str, Any]:
    """Run ``argv``, then reap it and every orphan it leaves; its wall time and CPU (this runs in a child)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    started = time.perf_counter()
    with (out / "stdout.txt").open("wb") as stdout, (out / "stderr.txt").open("wb") as stderr:
        pid = subprocess.Popen(argv, stdout=stdout, stderr=stderr).pid  # noqa: S603 - reaped below
    deadline = time.monotonic() + RUN_TIMEOUT_S
    # Wait for the exit without reaping, so the exited process's own times can still be read.
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
        time.sleep(0.01)
    wall = time.perf_counter() - started
    own, _ = _stat_times(pid)
    _, status = os.waitpid(pid, 0)
    # Orphans the run left (a detached control master, say) were re-parented to this process.
    left: list[int] = []
    settle = time.monotonic() + 10
    while True:
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if reaped == 0:
            if time.monotonic() > settle:
                left = [
                    int(p)
                    for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
                ]
                for orphan in left:
                    os.kill(orphan, 9)
                settle = float("inf")
            time.sleep(0.02)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit": os.waitstatus_to_exitcode(status),
        "wall_s": wall,
        "iobench_cpu_s": own,
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "left_running": left,
        "stdout": (out / "stdout.txt").read_text(),
        "stderr": (out / "stderr.txt").read_text()[-2000:],
    }


# What `iobench run` does, through the library, with the moments that matter recorded: the run
# starting (connected, checked, servers up), each point's start and end, the run's end.
DRIVER = """
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[3])
from hosts_cost import tree_cpu
import iobench
from iobench.runner.sweep import NullProgress
t0 = time.monotonic()
sshd = [int(p) for p in os.environ.get("HOSTS_SSHD", "").split()]
marks = {"points": []}
def cpu():
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [time.process_time(), children.ru_utime + children.ru_stime, *tree_cpu(sshd)]
class Timed(NullProgress):
    def point_started(self, run, index):
        now = time.monotonic() - t0
        if not marks["points"]:
            marks["first"] = cpu()
        marks["points"].append([now, None])
    def point_finished(self, run, outcome):
        marks["points"][-1][1] = time.monotonic() - t0
        marks["last"] = cpu()
        rss = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")]
        marks["rss_kib"] = max(marks.get("rss_kib", 0), rss[0])
        marks["fds"] = max(marks.get("fds", 0), len(os.listdir("/proc/self/fd")))
        marks["threads"] = max(marks.get("threads", 0), len(os.listdir("/proc/self/task")))
r = iobench.run(iobench.load_matrix(sys.argv[1]), out=sys.argv[2], progress=Timed())
marks["ended"] = time.monotonic() - t0
marks["run_dir"] = str(r.run_dir)
marks["total"] = [time.process_time()]
print(json.dumps(marks))
"""


def run_once(matrix: Path, hosts: NetnsHosts, out: Path) -> dict[str, Any]:
    """One run under a reaper; adds the hosts' side CPU and the run's moments (setup, points, teardown)."""
    out.mkdir(parents=True)
    # The sshd listeners (children of `unshare`) reap the sessions, and with them the fio servers.
    sshds = [c for h in hosts if h.sshd is not None for c in children_of(h.sshd.pid)]
    before = sum(_stat_times(p)[1] for p in sshds)
    argv = [sys.executable, "-c", DRIVER, str(matrix), str(out / "results"), str(Path(__file__).parent)]
    listeners = " ".join(str(h.sshd.pid) for h in hosts if h.sshd is not None)
    done = subprocess.run(
        [sys.executable, __file__, "--reap", str(out), "--", *argv],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S + 60,
        check=True,
        env={**os.environ, "HOSTS_SSHD": listeners},
    )
    result: dict[str, Any] = json.loads(done.stdout)
    # sshd reaps its sessions once they closed; give the last ones a moment.
    time.sleep(0.5)
    result["hosts_cpu_s"] = sum(_stat_times(p)[1] for p in sshds) - before
    marks = json.loads(result["stdout"])
    points = marks["points"]
    result["setup_s"] = (
        points[0][0] if points else math.nan
    )  # connect, check, lock, start servers, the run dir
    result["teardown_s"] = marks["ended"] - points[-1][1] if points else math.nan
    starts = [p[0] for p in points]
    result["point_spacing_s"] = (
        statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))
        if len(starts) > 1
        else math.nan
    )
    result["run_dir"] = marks["run_dir"]
    result.update(rss_mib=marks["rss_kib"] / 1024, fds=marks["fds"], threads=marks["threads"])
    (own0, kids0, fio0, other0), (own1, kids1, fio1, other1) = marks["first"], marks["last"]
    result["iobench_point_cpu_s"] = (own1 - own0) / len(points)
    result["client_point_cpu_s"] = (kids1 - kids0) / len(points)
    result["iobench_rest_cpu_s"] = marks["total"][0] - (own1 - own0)
    result["hosts_fio_point_cpu_s"] = (fio1 - fio0) / len(points)
    result["hosts_point_cpu_s"] = (other1 - other0) / len(points)
    return result


# $1: the server's folder. A plain fio server on a private socket, for as long as the session's input lasts.
PLAIN_SERVER = r"""
d=$(mktemp -d /tmp/plain-fio.XXXXXX) || exit 1
cd "$d" && fio --server="sock:$d/fio.sock" </dev/null >/dev/null 2>&1 &
pid=$!
while [ ! -S "$d/fio.sock" ]; do sleep 0.02; done
echo "$d"
cat >/dev/null
kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$d"
"""


def plain_fio(hosts: list[NetnsHost], every: NetnsHosts, run_dir: Path, base: Path) -> dict[str, Any]:
    """The same points as plain ``fio --client`` (no iobench) on servers of the same hosts: its wall and the hosts' CPU."""
    sshds = [c for h in every if h.sshd is not None for c in children_of(h.sshd.pid)]
    before = sum(_stat_times(p)[1] for p in sshds)
    control = Path(tempfile.mkdtemp(prefix="plain-", dir=base))
    masters, sessions, walls = [], [], []
    try:
        for host in hosts:
            ssh = ["ssh", "-F", str(every.ssh_config), "-o", f"ControlPath={control / host.name}.sock"]
            masters.append(subprocess.Popen([*ssh, "-o", "ControlMaster=yes", "-N", f"root@{host.name}"]))
        for host in hosts:
            sock = control / f"{host.name}.sock"
            while not sock.exists():
                time.sleep(0.02)
            ssh = ["ssh", "-F", str(every.ssh_config), "-o", f"ControlPath={sock}"]
            session = subprocess.Popen(
                [*ssh, f"root@{host.name}", "sh", "-c", shlex.quote(PLAIN_SERVER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert session.stdout is not None
            folder = session.stdout.readline().strip()
            sessions.append(session)
            subprocess.run(
                [
                    *ssh,
                    "-O",
                    "forward",
                    "-L",
                    f"{control / host.name}.fio:{folder}/fio.sock",
                    f"root@{host.name}",
                ],
                check=True,
                capture_output=True,
            )
        listeners = [h.sshd.pid for h in every if h.sshd is not None]
        fio_first, at_first = tree_cpu(listeners)
        for point in sorted(p for p in (run_dir / "points").iterdir() if p.name[0].isdigit()):
            work = base / f"plain-{point.name}"
            work.mkdir()
            argv = ["fio", "--output-format=json+", f"--output={work / 'fio.json'}"]
            for host in hosts:
                (work / f"host-{host.name}").symlink_to(control / f"{host.name}.fio")
                shutil.copy(point / f"job-{host.name}.fio", work)
                argv += [f"--client=sock:host-{host.name}", f"job-{host.name}.fio"]
            started = time.monotonic()
            subprocess.run(argv, cwd=work, check=True, capture_output=True, timeout=RUN_TIMEOUT_S)
            walls.append(time.monotonic() - started)
        fio_last, at_last = tree_cpu(listeners)
    finally:
        for session in sessions:
            assert session.stdin is not None
            session.stdin.close()
            session.wait(timeout=30)
        for master in masters:
            master.terminate()
            master.wait(timeout=30)
    time.sleep(0.5)
    return {
        "plain_point_s": statistics.median(walls),
        "plain_hosts_cpu_s": sum(_stat_times(p)[1] for p in sshds) - before,
        "plain_hosts_point_cpu_s": (at_last - at_first) / len(walls),
        "plain_hosts_fio_point_cpu_s": (fio_last - fio_first) / len(walls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hosts", type=int, nargs="+", default=[1, 8, 32], help="host counts (0: this machine alone)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="print a table for docs/benchmarks.md")
    parser.add_argument("--reap", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reap is not None:
        print(json.dumps(reaper(args.argv, args.reap)))
        return
    rows = []
    # Targets on tmpfs: the null engine does no I/O, and no lock on this machine's disk is taken.
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with (
        tempfile.TemporaryDirectory(prefix="iobench-hosts-cost-", dir=scratch) as tmp,
        netns_hosts(max(args.hosts)) as hosts,
    ):
        base = Path(tmp)
        others = Others([h.sshd.pid for h in hosts if h.sshd is not None])
        for n in args.hosts:
            matrix = base / f"hosts-{n}.yaml"
            matrix.write_text(matrix_text(hosts.hosts[:n], base))
            runs = []
            for r in range(args.rounds):
                result = run_once(matrix, hosts, base / f"run-{n}-{r}")
                if result["exit"] != 0 or result["left_running"]:
                    raise SystemExit(f"{n} hosts, round {r}: {result}")
                if n > 0:
                    result.update(
                        plain_fio(hosts.hosts[:n], hosts, Path(result["run_dir"]), base / f"run-{n}-{r}")
                    )
                else:
                    result.update(
                        plain_point_s=math.nan, plain_hosts_cpu_s=math.nan, plain_hosts_point_cpu_s=math.nan
                    )
                runs.append(result)
            rows.append((n, {k: statistics.median(float(x[k]) for x in runs) for k in MEASURES}))
            if not args.markdown:
                print(n, rows[-1][1], flush=True)
        taken = others.cpus()
    print(
        "| hosts | setup (s) | teardown (s) | point spacing (s) | plain fio --client a point (s) | ratio "
        "| iobench CPU a point (ms) | fio client CPU a point (ms) | iobench CPU, setup and teardown (s) "
        "| each host's CPU a point besides fio, iobench (ms) | the same, plain fio (ms) | added (ms) "
        "| fio's own CPU a point on each host, iobench / plain fio (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, m in rows:
        keys = (
            "hosts_point_cpu_s",
            "plain_hosts_point_cpu_s",
            "hosts_fio_point_cpu_s",
            "plain_hosts_fio_point_cpu_s",
        )
        host_ms = {k: 1000 * m[k] / n if n else math.nan for k in keys}
        print(
            f"| {n or 'this machine'} | {m['setup_s']:.2f} | {m['teardown_s']:.2f} | "
            f"{m['point_spacing_s']:.2f} | {m['plain_point_s']:.2f} | "
            f"{m['point_spacing_s'] / m['plain_point_s']:.2f} | {1000 * m['iobench_point_cpu_s']:.0f} | "
            f"{1000 * m['client_point_cpu_s']:.0f} | {m['iobench_rest_cpu_s']:.2f} | "
            f"{host_ms['hosts_point_cpu_s']:.0f} | {host_ms['plain_hosts_point_cpu_s']:.0f} | "
            f"{host_ms['hosts_point_cpu_s'] - host_ms['plain_hosts_point_cpu_s']:.0f} | "
            f"{host_ms['hosts_fio_point_cpu_s']:.0f} / {host_ms['plain_hosts_fio_point_cpu_s']:.0f} |"
        )
    remote = sorted((n, m) for n, m in rows if n > 0)
    if len(remote) >= 2:
        (n0, m0), (n1, m1) = remote[0], remote[-1]
        during = 1000 * (m1["iobench_point_cpu_s"] - m0["iobench_point_cpu_s"]) / (n1 - n0)
        whole = 1000 * (m1["iobench_cpu_s"] - m0["iobench_cpu_s"]) / ((n1 - n0) * POINTS)
        print(
            f"\neach host beyond {n0}, per point: iobench CPU {during:.1f} ms while the points run, "
            f"{whole:.1f} ms with setup and teardown spread over the {POINTS} points; "
            f"{(m1['rss_mib'] - m0['rss_mib']) / (n1 - n0):.1f} MiB of memory, "
            f"{(m1['fds'] - m0['fds']) / (n1 - n0):.1f} file descriptors and "
            f"{(m1['threads'] - m0['threads']) / (n1 - n0):.1f} threads here at the points' end "
            f"({m1['rss_mib']:.0f} MiB, {m1['fds']:.0f} descriptors, {m1['threads']:.0f} threads at {n1} hosts)"
        )
    print(f"({POINTS} points of 1 s; other processes took {taken:.2f} of {os.cpu_count()} CPUs meanwhile)")


MEASURES = (
    "wall_s",
    "iobench_point_cpu_s",
    "client_point_cpu_s",
    "iobench_rest_cpu_s",
    "hosts_point_cpu_s",
    "plain_hosts_point_cpu_s",
    "hosts_fio_point_cpu_s",
    "plain_hosts_fio_point_cpu_s",
    "iobench_cpu_s",
    "client_cpu_s",
    "hosts_cpu_s",
    "setup_s",
    "teardown_s",
    "point_spacing_s",
    "plain_point_s",
    "plain_hosts_cpu_s",
    "rss_mib",
    "fds",
    "threads",
)


if __name__ == "__main__":
    main()
