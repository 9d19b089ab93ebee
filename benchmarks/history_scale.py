"""A history store at scale: 10,000 runs of 16 points added, one series' 1,000 runs read.

The runs' rows are made here (the numbers of a 16-point matrix on one machine, 2 % noise
and a 10 % step every 1,000 runs) and added through the library in batches of ``--batch``
runs, as ``iobench history add`` of many run directories adds them: one part per batch,
merged as parts gather. Reading a run directory's frame is ``iobench.load``'s cost and is
measured with it (docs/benchmarks.md), not here.

Lines (docs/benchmarks.md): adding 10,000 runs ≤ 60 s; reading one series of 1,000 runs ≤ 1 s;
``changes`` of that series' metrics is reported beside them.

    .venv/bin/python benchmarks/history_scale.py [--runs 10000] [--points 16] [--batch 100] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from iobench.answers import history
from iobench.answers.changepoints import change_points, noise


def run_rows(run: int, points: int, rng: np.random.Generator) -> history.RunRows:
    key = f"run{run:06d}"
    level = 1000.0 * (1.1 ** (run // 1000))
    frame = pd.DataFrame(
        {
            "run_key": key,
            "run_id": f"nightly-{run:06d}",
            "started": f"2026-01-01T00:00:00+00:00.{run:06d}",
            "series": [f"series{p:02d}" for p in range(points)],
            "point": [f"bs={4 << p}k" for p in range(points)],
            "host": "",
            "direction": "read",
            "n": 3,
            "key": "{}",
            "events": json.dumps({"kernel": f"6.{run // 1000}"}),
            "volatile": json.dumps({"hostname": "bench"}),
            "iops": level * (1 + rng.normal(0, 0.02, points)),
            "bw_bytes": level * 4096 * (1 + rng.normal(0, 0.02, points)),
            "lat_mean_us": 1e6 / level * (1 + rng.normal(0, 0.02, points)),
            "clat_p99_us": 3e6 / level * (1 + rng.normal(0, 0.02, points)),
        }
    )
    return history.RunRows(key, f"nightly-{run:06d}", "nightly", frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    batches = [
        [run_rows(run, args.points, rng) for run in range(first, min(first + args.batch, args.runs))]
        for first in range(0, args.runs, args.batch)
    ]
    with tempfile.TemporaryDirectory(prefix="iobench-history-") as folder:
        store = Path(folder) / "store"
        started = time.perf_counter()
        for batch in batches:
            history.add_rows(store, batch)
        added = time.perf_counter() - started
        started = time.perf_counter()
        one = history.load(store, series="series03")
        read = time.perf_counter() - started
        last = one["iops"].to_numpy(dtype=float)[-1500:]
        started = time.perf_counter()
        found = change_points(last, min_magnitude=history.NOISE_FACTOR * noise(last))
        detect = time.perf_counter() - started
        files = len(history.open_store(store).files())
    rows = [
        (
            "runs added",
            f"{args.runs:,} of {args.points} points, {args.batch} a batch",
            f"{added:.1f} s",
            "≤ 60 s",
        ),
        ("one series read", f"{len(one):,} runs, {files} files in the store", f"{read:.2f} s", "≤ 1 s"),
        (
            "its change points",
            f"last 1,500 runs (a step at 1,000): {len(found)} found",
            f"{detect:.2f} s",
            "",
        ),
    ]
    if args.markdown:
        print("| step | what | time | line |\n|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in rows:
            print("  ".join(row))
    return 0 if added <= 60 and read <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
