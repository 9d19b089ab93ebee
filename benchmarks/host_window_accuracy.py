"""How right the cluster's numbers of a point on several hosts are: the window, the counts in it, the anchor.

Runs short sweeps through ``iobench.run`` on namespace hosts with their own
sshd (tests/netns_hosts.py; needs root and openssh-server), each host's logs
in Unix time, and measures what docs/numbers.md states:

- **the logs against fio's totals**: per job and direction, the I/Os the IOPS
  log accounts for (each sample's rate × the time it covers, the last rate
  carried to the job's end) over fio's ``total_ios``: the shape
  ``window_ios`` spreads fio's total by;
- **the anchor**: a job's start is its last latency sample less fio's runtime;
  its first IOPS sample should then fall one ``log_avg_msec`` after it (fio
  samples on the window's boundary): the residual, in ms;
- **the cluster against the truth**: hosts held at ``rate_iops`` each, so the
  cluster's IOPS while all ran is known (hosts × rate); with unequal runtimes
  (targets of different sizes, not time-based) and with equal ones;
- ``window_s`` and ``start_skew_ms`` of every point.

    .venv/bin/python benchmarks/host_window_accuracy.py [--hosts 4] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from netns_hosts import netns_hosts  # noqa: E402

import iobench  # noqa: E402
from iobench.matrix.model import load_matrix  # noqa: E402
from iobench.results.hostspan import cumulative  # noqa: E402
from iobench.results.timeseries import read_run_logs  # noqa: E402
from iobench.store.rundir import RunDir  # noqa: E402

CASES: dict[str, tuple[str, str, int | None]] = {
    # name: (fio options, target sizes per host ("8M" each, or a list), the truth per host in IOPS)
    "equal, 5 s at 2,000 IOPS each": ("runtime: 5\ntime_based: 1\nrate_iops: 2000\n", "8M", 2000),
    "unequal, 1,000 IOPS each, 1–4 s": ("rate_iops: 1000\nlog_avg_msec: 500\n", "sizes", 1000),
    "equal, 3 s, as fast as they go": ("runtime: 3\ntime_based: 1\n", "8M", None),
}


def _matrix(path: Path, hosts: Any, fio: str, sizes: str) -> Path:
    entries = []
    for index, host in enumerate(hosts):
        size = f"{4 * (index + 1)}M" if sizes == "sizes" else sizes
        options = ", ".join(f'"{o}"' for o in host.ssh_options)
        entries.append(
            f"  - {{name: {host.name}, ssh: {host.ssh}, ssh_options: [{options}], "
            f"targets: [{{path: {path.parent / (host.name + '.dat')}, size: {size}}}]}}"
        )
    text = (
        "version: 1\nname: accuracy\nrepeat: 3\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        + textwrap.indent(fio, "  ")
        + "hosts:\n"
        + "\n".join(entries)
        + "\nmatrix:\n  iodepth: [1]\n"
    )
    path.write_text(text)
    return path


def measure(run_dir: Path, truth: int | None, hosts: int) -> dict[str, list[float]]:
    """The figures of one run (module docstring)."""
    frame = iobench.load(run_dir)
    logs = read_run_logs(RunDir.open(run_dir))
    series, spans = logs.series, logs.spans
    width = {(int(p), int(r)): float(w) for p, r, w in logs.timing[["point", "repeat", "window_s"]].values}
    out: dict[str, list[float]] = {"log_over_json": [], "anchor_ms": [], "cluster_err_pct": []}
    rows = frame[frame["status"].eq("ok") & frame["direction"].notna()]
    iops = series[series["metric"].eq("iops")]
    for span in spans.itertuples(index=False):
        key = (int(span.point), int(span.repeat))
        mine = iops[
            (iops["point"] == span.point)
            & (iops["repeat"] == span.repeat)
            & (iops["host"] == span.host)
            & (iops["job"] == span.job)
        ].sort_values("t_s")
        job = rows[
            (rows["point"] == span.point) & (rows["repeat"] == span.repeat) & (rows["host"] == span.host)
        ]
        if mine.empty or job.empty:
            continue
        times, counts = cumulative(
            mine["t_s"].to_numpy(float), mine["value"].to_numpy(float), span.start_s, span.end_s, width[key]
        )
        out["log_over_json"].append(counts[-1] / float(job["total_ios"].sum()))
        out["anchor_ms"].append((float(mine["t_s"].iloc[0]) - span.start_s - width[key]) * 1000.0)
    totals = iobench.point_totals(frame)
    if truth is not None:
        out["cluster_err_pct"] = list(100.0 * (totals["iops"].astype(float) / (hosts * truth) - 1.0))
    out["window_s"] = list(totals["window_s"].astype(float))
    out["start_skew_ms"] = list(totals["start_skew_ms"].astype(float))
    out["overlap_pct"] = list(totals["overlap_pct"].astype(float))
    return out


def _span(values: list[float], digits: int = 2) -> str:
    if not values:
        return "–"
    return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / {max(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = []
    with netns_hosts(args.hosts) as hosts, tempfile.TemporaryDirectory(prefix="iobench-accuracy-") as tmp:
        for name, (fio, sizes, truth) in CASES.items():
            where = Path(tmp) / str(len(rows))
            where.mkdir()
            matrix = load_matrix(_matrix(where / "matrix.yaml", list(hosts), fio, sizes))
            result = iobench.run(matrix, out=where / "results")
            found = measure(Path(result.run_dir), truth, args.hosts)
            rows.append((name, found))
    header = (
        "| case | log ÷ fio's total, per job (min / median / max) | anchor residual ms | "
        "cluster vs hosts × rate, % | window_s | start_skew_ms | overlap_pct |"
    )
    print(header)
    print("|" + "---|" * 7)
    for name, found in rows:
        print(
            f"| {name} | {_span(found['log_over_json'], 4)} | {_span(found['anchor_ms'], 0)} | "
            f"{_span(found['cluster_err_pct'], 2)} | {_span(found['window_s'], 3)} | "
            f"{_span(found['start_skew_ms'], 0)} | {_span(found['overlap_pct'], 1)} |"
        )
    print(f"\n{args.hosts} namespace hosts, 3 repeats per case; numpy {np.__version__}")


if __name__ == "__main__":
    main()
