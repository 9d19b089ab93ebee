"""What a run's preflight costs per host: wall time and requests to its agent, on namespace hosts.

Creates N test hosts on this machine (network namespaces with their own sshd:
tests/netns_hosts.py; needs root and openssh-server) and runs a fleet's
preflight against all of them, round after round, each round a fresh fleet (new
control connections), as ``iobench run`` does before anything runs: connect,
start the agent, probe fio and numactl, copy sysfs and procfs into a snapshot, read the
topology, guard the targets. Reports the median and best wall time of the
preflight, the remote commands it sent per host (each a round trip over the
control connection) and how much the snapshot brought back per host.

``--settings`` also times reading ``iobench system show`` of one host the two
ways it could be read: from the preflight's snapshot (no request), and live
through a :class:`~iobench.system.remote.RemoteRoot` (a request per file and
folder), to show what reading it from the snapshot saves.

    .venv/bin/python benchmarks/preflight_cost.py [--hosts 8] [--rounds 5] [--settings]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from netns_hosts import NetnsHost, netns_hosts  # noqa: E402
from overhead import OthersBusy  # noqa: E402

from iobench.matrix.targets import Target  # noqa: E402
from iobench.system.fleet import Fleet, HostSpec, ssh_connector  # noqa: E402
from iobench.system.ssh import SshTarget  # noqa: E402


def fio_version() -> str:
    return subprocess.run(["fio", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def specs(hosts: Sequence[NetnsHost], base: Path) -> list[HostSpec]:
    return [
        HostSpec(
            SshTarget(h.ssh, h.ssh_options, h.name),
            (Target(str(base / f"{h.name}.dat"), 2**24, None, False, f"{h.name}.dat"),),
        )
        for h in hosts
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settings", action="store_true", help="also time system show: snapshot vs live")
    args = parser.parse_args()
    version = fio_version()
    with tempfile.TemporaryDirectory(prefix="iobench-preflight-") as tmp, netns_hosts(args.hosts) as hosts:
        base = Path(tmp)
        walls: list[float] = []
        per_host: list[int] = []
        watch = OthersBusy()
        for _ in range(args.rounds):
            with Fleet(specs(hosts.hosts, base), fio_version=version, connector=ssh_connector) as fleet:
                started = time.perf_counter()
                fleet.preflight()
                walls.append(time.perf_counter() - started)
                per_host += [sum(h.agent.asked.values()) for h in fleet.hosts if h.agent is not None]
                if args.settings:
                    settings_cost(fleet)
        others = watch.cpus()
    print(
        f"preflight of {args.hosts} hosts, {args.rounds} rounds: median {statistics.median(walls):.3f} s, "
        f"best {min(walls):.3f} s; {statistics.mean(per_host):.0f} requests to each host's agent"
    )
    print(f"other processes and steal took {others:.2f} of {os.cpu_count()} CPUs on average")


def settings_cost(fleet: Fleet) -> None:
    """``system show`` of the first host from its snapshot, then live: wall time and remote commands."""
    from iobench.system.remote import RemoteRoot
    from iobench.system.stability import show

    host = fleet.hosts[0]
    assert host.facts is not None
    started = time.perf_counter()
    show(host.facts.snapshot.system)
    snapshot_s = time.perf_counter() - started
    assert host.agent is not None
    before = sum(host.agent.asked.values())
    started = time.perf_counter()
    show(RemoteRoot(host))
    live_s = time.perf_counter() - started
    print(
        f"system show of {host.name}: from the snapshot {snapshot_s * 1000:.1f} ms, no request; "
        f"live {live_s * 1000:.0f} ms, {sum(host.agent.asked.values()) - before} requests to its agent"
    )


if __name__ == "__main__":
    main()
