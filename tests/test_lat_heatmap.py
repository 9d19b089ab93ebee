"""Latency over time from fio's histogram logs: asking for them, reading them, the heatmap."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iobench
from iobench.errors import MatrixError, ResultsError
from iobench.matrix.model import load_matrix
from iobench.planner.plans import plan
from iobench.planner.timelogs import HIST_LOG_FILE, LOG_FILE
from iobench.plots.figures import KINDS, RUN_KINDS
from iobench.plots.latheatmap import draw_map, lat_heatmap
from iobench.results.histlogs import (
    HistLog,
    bin_edges,
    bin_values,
    hist_logs,
    latency_maps,
    parse_block,
    percentiles,
    point_map,
)
from iobench.store.records import PointMeta

#: fio 3.33's bins: 29 groups of 64.
FIO_BINS = 29 * 64
#: fio ships its histogram-log parser as documentation (Debian's fio package).
FIOLOGPARSER = Path("/usr/share/doc/fio/fiologparser_hist.py.gz")


def fio_index(value: int) -> int:
    """fio's ``plat_val_to_idx()`` as its stat.h describes it: the bin a latency (ns) goes into."""
    msb = value.bit_length() - 1 if value else 0
    if msb <= 6:
        return value
    error_bits = msb - 6
    return ((error_bits + 1) << 6) + ((value >> error_bits) & 63)


def hist_line(t_ms: int, ddir: int, counts: np.ndarray) -> str:
    return f"{t_ms}, {ddir}, 4096, " + ", ".join(str(int(c)) for c in counts) + "\n"


def counts_at(latencies_ns: list[int], bins: int = FIO_BINS) -> np.ndarray:
    out = np.zeros(bins, dtype=np.int64)
    for value in latencies_ns:
        out[fio_index(int(value))] += 1
    return out


# --- fio's bins ---------------------------------------------------------------------------------


def test_every_latency_falls_in_the_bin_fio_puts_it_in() -> None:
    edges = bin_edges(FIO_BINS)
    rng = np.random.default_rng(7)
    values = np.unique(
        np.concatenate([np.arange(0, 300), rng.integers(1, 2**33, 5000), 2 ** np.arange(1, 33)])
    )
    index = np.array([fio_index(int(v)) for v in values])
    assert (edges[index] <= values).all() and (values < edges[index + 1]).all()
    widths = np.diff(edges)
    assert (widths > 0).all() and (widths[128:] <= edges[128:-1] / 64).all()
    values_ns = bin_values(FIO_BINS)
    assert (edges[:-1] <= values_ns).all() and (values_ns < edges[1:]).all()


def test_coarse_bins_add_neighbours_and_keep_the_outer_edges() -> None:
    fine, coarse = bin_edges(FIO_BINS), bin_edges(FIO_BINS >> 3, 3)
    assert len(coarse) == FIO_BINS // 8 + 1 and (coarse == fine[::8]).all()


def test_percentiles_follow_fio_s_first_bin_reaching_p_rule() -> None:
    values = np.arange(10, dtype=float)
    counts = np.array([[0, 5, 0, 4, 0, 0, 0, 0, 0, 1], [0] * 10])
    found = percentiles(counts, values, (50.0, 90.0, 99.0))
    assert found[0].tolist() == [1.0, 3.0, 9.0]
    assert np.isnan(found[1]).all()


# --- asking for the log -------------------------------------------------------------------------

MATRIX = """
version: 1
name: hist
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  bs: 4k
  runtime: 3
  time_based: 1
{extra}"""


def _matrix(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.format(target=tmp_path / "target.dat", extra=extra))
    return path


@pytest.mark.fio
def test_log_hist_msec_asks_every_section_for_its_histogram_log(tmp_path: Path) -> None:
    without = plan(load_matrix(_matrix(tmp_path))).runs[0].processes[0]
    assert "write_hist_log" not in without.jobfile
    process = plan(load_matrix(_matrix(tmp_path, "  log_hist_msec: 500\n"))).runs[0].processes[0]
    (section,) = process.sections
    lines = process.jobfile.splitlines()
    assert "log_hist_msec=500" in lines
    assert f"write_hist_log={section}" in lines[lines.index(f"[{section}]") :]


@pytest.mark.fio
def test_the_histogram_log_s_name_is_iobench_s(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match=r"write_hist_log.*set by iobench.*log_hist_msec"):
        load_matrix(_matrix(tmp_path, "  write_hist_log: mine\n"))


def test_histogram_log_names_are_not_time_series_logs() -> None:
    for name, section, client in [
        ("sda_clat_hist.1.log", "sda", None),
        ("nvme0n1_clat_hist.12.log.host-b", "nvme0n1", "host-b"),
        ("t_clat_hist.log", "t", None),
    ]:
        match = HIST_LOG_FILE.match(name)
        assert match is not None and match["section"] == section and match["client"] == client
        assert LOG_FILE.match(name) is None
    assert HIST_LOG_FILE.match("sda_clat.1.log") is None


# --- reading ------------------------------------------------------------------------------------


def test_lines_add_into_time_columns_per_host_and_merge(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    written: list[tuple[str, int, np.ndarray]] = []
    start = {"a": 1_700_000_000_000, "b": 1_700_000_000_060}  # Unix ms: b started 60 ms later
    for host, first in start.items():
        lines = []
        for window in range(10):
            for ddir in (0, 1):
                counts = counts_at(list(rng.integers(1_000, 2_000_000, 50)))
                lines.append(hist_line(first + 1000 * (window + 1), ddir, counts))
                written.append((host, first - start["a"] + 1000 * (window + 1), counts))
        (tmp_path / f"t_clat_hist.1.log.host-{host}").write_text("".join(lines))
    logs = [HistLog(tmp_path / f"t_clat_hist.1.log.host-{h}", h, "t") for h in start]
    latency = point_map(1, 1, logs, window_ms=1000, columns=2)
    assert set(latency.counts) == {"a", "b"}
    assert latency.counts["a"].shape == (2, FIO_BINS) and len(latency.t_edges_s) == 3
    # time counts from a's first window's start; each column holds whole windows and ends after the last
    assert latency.t_edges_s[0] == 0 and latency.t_edges_s[-1] >= 10.06 and latency.t_edges_s[1] % 1 == 0
    for host in start:
        late = [c for h, t, c in written if h == host and t > latency.t_edges_s[1] * 1000]
        early = [c for h, t, c in written if h == host and t <= latency.t_edges_s[1] * 1000]
        assert late and early
        assert (latency.counts[host][1] == np.sum(late, axis=0)).all()
        assert (latency.counts[host][0] == np.sum(early, axis=0)).all()
    assert (latency.merged() == latency.counts["a"] + latency.counts["b"]).all()
    reads = point_map(1, 1, logs, window_ms=1000, columns=20, direction="read")
    assert reads.merged().sum() == 2 * 10 * 50 and reads.merged().shape[0] == 11


def test_blocks_are_bounded_and_give_the_same_sums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t_clat_hist.1.log"
    counts = counts_at([5_000] * 3 + [70_000])
    path.write_text("".join(hist_line(1000 * (w + 1), 0, counts) for w in range(40)))
    log = [HistLog(path, "h", "t")]
    whole = point_map(1, 1, log, window_ms=1000, columns=8)
    monkeypatch.setattr("iobench.results.histlogs.BLOCK_BYTES", 10_000)  # ~3 lines a block
    pieces = point_map(1, 1, log, window_ms=1000, columns=8)
    assert (whole.counts["h"] == pieces.counts["h"]).all() and whole.counts["h"].sum() == 160


def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t_clat_hist.1.log"
    good = hist_line(1000, 0, counts_at([100]))
    path.write_text(good + good.replace(", 1,", ", x,", 1) + good)
    with pytest.raises(ResultsError, match=r"t_clat_hist\.1\.log:2: not a line of fio's histogram log"):
        point_map(1, 1, [HistLog(path, "h", "t")], window_ms=1000)
    with pytest.raises(ResultsError, match=r"x\.log:2: not a line"):
        parse_block(Path("x.log"), 1, b"1, 0, 4096, 1, 2\n1, 0, 4096, 1\n", 5)


def test_a_log_without_line_ends_is_refused_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t_clat_hist.1.log"
    path.write_text(hist_line(1000, 0, counts_at([100])) + "1, " * 40_000)
    monkeypatch.setattr("iobench.results.histlogs.BLOCK_BYTES", 4096)
    with pytest.raises(ResultsError, match=r"t_clat_hist\.1\.log:2: a line of over 65,536 bytes"):
        point_map(1, 1, [HistLog(path, "h", "t")], window_ms=1000)


def test_counts_that_fit_no_coarseness_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t_clat_hist.1.log"
    path.write_text(hist_line(1000, 0, np.ones(100, dtype=np.int64)))
    with pytest.raises(ResultsError, match=r"100 counts a line do not fit fio's bins"):
        point_map(1, 1, [HistLog(path, "h", "t")], window_ms=1000)


# --- the figure ---------------------------------------------------------------------------------


def test_the_figure_has_a_merged_panel_one_per_host_and_three_percentile_lines(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    logs = []
    for host in ("a", "b", "c"):
        text = "".join(
            hist_line(1000 * (w + 1), 0, counts_at(list(rng.lognormal(11, 0.6, 200).astype(int))))
            for w in range(30)
        )
        (tmp_path / f"t_clat_hist.1.log.host-{host}").write_text(text)
        logs.append(HistLog(tmp_path / f"t_clat_hist.1.log.host-{host}", host, "t"))
    fig = draw_map(point_map(2, 1, logs, window_ms=1000))
    titles = [a.get_title() for a in fig.axes]
    assert titles[:4] == ["all hosts, merged", "host a", "host b", "host c"]
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["p50", "p99", "p99.9"]
    assert "lat-heatmap" in KINDS and "lat-heatmap" in RUN_KINDS


def test_past_32_hosts_the_merged_panel_still_adds_them_all(tmp_path: Path) -> None:
    logs = []
    for host in range(34):
        path = tmp_path / f"t_clat_hist.1.log.host-{host}"
        path.write_text("".join(hist_line(1000 * (w + 1), 0, counts_at([1000 + host] * 5)) for w in range(3)))
        logs.append(HistLog(path, f"h{host:02d}", "t"))
    latency = point_map(1, 1, logs, window_ms=1000)
    fig = draw_map(latency)
    titles = [a.get_title() for a in fig.axes if a.get_title().startswith("host ")]
    assert len(titles) == 32 and titles[-1] == "host h31"
    assert "the first 32 of 34 hosts" in fig.get_supxlabel()
    assert latency.merged().sum() == 34 * 3 * 5


def test_a_run_without_histogram_logs_says_how_to_get_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "points").mkdir(parents=True)
    manifest = {"schema_version": 1, "name": "x", "machine": {"host": "h"}, "status": "finished"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert latency_maps(run) == []
    # a job shorter than one window: fio leaves its log empty
    (tmp_path / "t_clat_hist.1.log").write_text("")
    meta = PointMeta(key="0001-r1", point=1, repeat=1, params={}, status="ok")
    assert hist_logs(tmp_path, meta, "h") == []
    with pytest.raises(ResultsError, match=r"no point wrote fio's histogram logs; set `log_hist_msec`"):
        lat_heatmap(run)


# --- real fio -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hist_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hist")
    path = _matrix(base, "  log_hist_msec: 500\n  rate_iops: 2000\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = iobench.run(load_matrix(path), out=base / "r")
    assert result.counts == {"ok": 1}
    return Path(result.run_dir)


@pytest.mark.fio
def test_a_real_run_logs_every_io_in_its_histograms_and_draws_the_figure(hist_run: Path) -> None:
    (point_dir,) = [p for p in (hist_run / "points").iterdir() if p.is_dir()]
    assert [p.name for p in point_dir.iterdir() if HIST_LOG_FILE.match(p.name)]
    (latency,) = latency_maps(hist_run)
    job = json.loads((point_dir / "fio.json").read_text())["jobs"][0]
    # fio logs a window's histogram at the first I/O after it ends: the last partial window is not logged.
    logged, done = int(latency.merged().sum()), int(job["read"]["total_ios"])
    assert 0.5 * done <= logged <= done
    assert latency.window_s == 0.5
    out = hist_run / "lat.png"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done_plot = subprocess.run(
        [sys.executable, "-m", "iobench", "plot", str(hist_run), "lat-heatmap", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done_plot.returncode == 0, done_plot.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = subprocess.run(
        [sys.executable, "-m", "iobench", "report", str(hist_run), "-o", str(hist_run / "rep")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert report.returncode == 0, report.stderr
    assert (hist_run / "rep" / "lat-heatmap.png").is_file()
    assert "lat-heatmap" in (hist_run / "rep" / "report.html").read_text()


@pytest.mark.fio
def test_percentiles_agree_with_fiologparser_hist_within_one_bin(hist_run: Path, tmp_path: Path) -> None:
    script = tmp_path / "fiologparser_hist.py"
    script.write_bytes(gzip.decompress(FIOLOGPARSER.read_bytes()))
    # fio's own runs are nanoseconds fast on the null engine; a log with a wide spread tests more bins.
    rng = np.random.default_rng(11)
    path = tmp_path / "t_clat_hist.1.log"
    text = "".join(
        hist_line(1000 * (w + 1) + 1, 0, counts_at(list(rng.lognormal(10 + w / 5, 0.8, 3000).astype(int))))
        for w in range(12)
    )
    path.write_text(text)
    real = next(p for p in (next((hist_run / "points").iterdir())).iterdir() if HIST_LOG_FILE.match(p.name))
    for log, window in ((path, 1000), (real, 500)):
        done = subprocess.run(
            [
                sys.executable,
                str(script),
                "--noweight",
                "-i",
                str(window),
                "--percentiles",
                "50:99:99.9",
                str(log),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        rows = [line.split(",") for line in done.stdout.splitlines()[1:] if line.strip()]
        theirs = np.array([[float(v) for v in row[5:8]] for row in rows])
        # fiologparser --noweight adds a line into the first interval end (a multiple of -i) it is
        # over 10 ms before; the same groups here, each group's counts added, then fio's rule.
        table = parse_block(log, 1, log.read_bytes())
        group = (table[:, 0] + 10) // window
        starts = np.flatnonzero(np.diff(group, prepend=-1))
        summed = np.add.reduceat(table[:, 3:], starts, axis=0)
        counts = summed[summed.sum(axis=1) > 0]
        values, edges = bin_values(counts.shape[1]), bin_edges(counts.shape[1])
        ours = percentiles(counts, values)
        assert ours.shape == theirs.shape and len(ours) >= 2
        # fiologparser interpolates between the values of the bins that hold I/Os (it gives a bin its
        # upper edge); fio's rule takes a bin's middle. One bin apart: between the edges of the occupied
        # bins on either side of ours.
        for row, (mine, fios) in enumerate(zip(ours, theirs, strict=True)):
            held = np.flatnonzero(counts[row])
            for value, reference in zip(mine, fios, strict=True):
                rank = int(np.searchsorted(edges[held], value, side="right")) - 1
                low = edges[held[max(rank - 1, 0)]]
                high = edges[held[min(rank + 1, len(held) - 1)] + 1]
                assert low <= reference <= high, (row, value, reference)
