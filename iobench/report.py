"""``iobench report``: every figure that fits a run, and one self-contained HTML page about it.

The page needs nothing but itself to open offline: figures are inline PNGs,
the style is inline, there is no script. It holds the figures, a summary table
(mean ± 95 % CI per point), the points that did not run or failed and why, the
machine (host, kernel, CPU, software versions, NUMA nodes), each target's
devices with their original settings, and the matrix as given.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import ResultsError, RunStorageError
from iobench.results import load
from iobench.stats import summarize
from iobench.store import RunDir, remedy, replacing, save_figure_file, storage

PAGE_DPI = 110
SUMMARY_METRICS = (
    ("iops", "IOPS", 1.0),
    ("bw_bytes", "MiB/s", 1 / 2**20),
    ("lat_mean_us", "mean lat µs", 1.0),
    ("clat_p99_us", "p99 clat µs", 1.0),
    ("cpu_us_per_io", "CPU µs/I/O", 1.0),
)
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-size: 13px; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.flag td { background: #fff6e0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 12px; }
.counts span { margin-right: 1.2em; } .bad { color: #b00; }
"""


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote: the HTML page and the figure files."""

    html: Path
    figures: list[Path]


def write_report(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    formats: Sequence[str] = ("png",),
) -> Report:
    """Draw every figure that fits the run and write ``report.html`` beside them.

    Parameters
    ----------
    run_dir
        A directory made by ``iobench run``.
    out
        Where to write (default ``<run_dir>/report``); created if missing.
    formats
        Figure file formats to write besides the page's inline PNGs: png, svg, pdf.

    Raises
    ------
    ResultsError
        When ``run_dir`` is not a run directory or a format is unknown.
    RunStorageError
        When a file cannot be written (disk full, read-only...); no file is
        left half written under its final name.
    """
    from iobench.plots import figures_for
    from iobench.plots.figures import FORMATS

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"unknown figure format {unknown[0]!r}; use one of {', '.join(FORMATS)}")
    run = RunDir.open(run_dir)
    frame = load(run.path)
    target = Path(out) if out is not None else run.path / "report"
    figures = figures_for(frame)
    written: list[Path] = []
    inline: list[tuple[str, str]] = []
    try:
        with storage(target):
            target.mkdir(parents=True, exist_ok=True)
        for name, fig in figures.items():
            written += [save_figure_file(fig, target / f"{name}.{fmt}") for fmt in formats]
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=PAGE_DPI)
            inline.append((name, base64.b64encode(buffer.getvalue()).decode("ascii")))
        page = target / "report.html"
        text = render_page(run, frame, inline)
        with replacing(page) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except RunStorageError as fault:
        fault.what = f"report not written: {fault.what}"
        fault.run_dir = str(run.path)
        fault.kept = f"the run is unchanged ({run.path}); figures written before the fault: {len(written)}"
        fault.finish = f"{remedy(fault)}, then `{_report_command(run.path, out)}` again"
        raise
    return Report(page, written)


def _report_command(run_dir: Path, out: str | os.PathLike[str] | None) -> str:
    argv = ["iobench", "report", str(run_dir)] + ([] if out is None else ["-o", os.fspath(out)])
    return shlex.join(argv)


def render_page(run: RunDir, frame: pd.DataFrame, figures: Iterable[tuple[str, str]]) -> str:
    """The HTML text: title, counts, figures (base64 PNG), summary, problems, machine, targets, matrix."""
    manifest = run.manifest()
    matrix_path = run.path / "matrix.yaml"
    matrix_text = matrix_path.read_text(errors="replace") if matrix_path.is_file() else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(run.path.name)} — iobench report</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{_e(run.path.name)}</h1>",
        f'<p class="sub">{_e(_description(manifest, matrix_text))}</p>',
        _counts(manifest, frame),
        "<h2>Figures</h2>",
    ]
    drawn = [
        f'<figure id="fig-{_e(name)}"><img alt="{_e(name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(name)}</figcaption></figure>"
        for name, data in figures
    ]
    parts += drawn or ["<p>No figure: no point finished ok.</p>"]
    parts += ["<h2>Summary</h2>", _summary_table(frame), _problems_table(frame)]
    parts += ["<h2>Machine</h2>", _machine_table(manifest), _targets_table(manifest)]
    parts += ["<h2>Matrix</h2>", f"<pre>{_e(matrix_text)}</pre>", "</body></html>"]
    return "\n".join(parts) + "\n"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _description(manifest: dict[str, Any], matrix_text: str) -> str:
    for line in matrix_text.splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip()
    return str(manifest.get("name") or "")


def _counts(manifest: dict[str, Any], frame: pd.DataFrame) -> str:
    counts = manifest.get("counts") or {}
    if not counts and "status" in frame:
        per_point = frame.drop_duplicates(["point", "repeat"])["status"]
        counts = {str(k): int(v) for k, v in per_point.value_counts().items()}
    spans = [
        f'<span class="{"bad" if status in ("failed", "timeout") else ""}">{_e(status)}: {n}</span>'
        for status, n in sorted(counts.items())
    ]
    when = " → ".join(str(manifest[k]) for k in ("started", "finished") if manifest.get(k))
    return f'<p class="counts">{"".join(spans)}<span>{_e(when)}</span></p>'


def _mean_ci(row: pd.Series, metric: str, scale: float) -> str:
    mean = row.get(f"{metric}_mean")
    if mean is None or pd.isna(mean):
        return "–"
    ci = row.get(f"{metric}_ci95")
    digits = 0 if abs(float(mean) * scale) >= 100 else 2
    text = f"{float(mean) * scale:,.{digits}f}"
    if ci is not None and not pd.isna(ci) and math.isfinite(float(ci)):
        text += f" ± {float(ci) * scale:,.{digits}f}"
    return text


def _summary_table(frame: pd.DataFrame) -> str:
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    if ok.empty:
        return "<p>No point finished ok.</p>"
    summary = summarize(ok)
    keys = [
        c
        for c in summary.columns[: list(summary.columns).index("n")]
        if c in ("point", "direction", "target") or summary[c].nunique(dropna=False) > 1
    ]
    metrics = [(m, title, scale) for m, title, scale in SUMMARY_METRICS if f"{m}_mean" in summary]
    head = [*keys, "n", *(title for _, title, _ in metrics), "CV (IOPS)", "flags"]
    rows = []
    for _, row in summary.iterrows():
        flags = [name for name in ("noisy", "short_runtime") if bool(row.get(name) is True)]
        cells = [f"<td>{_e(_plain(row[k]))}</td>" for k in keys]
        cells.append(f'<td class="num">{int(row["n"])}</td>')
        cells += [f'<td class="num">{_e(_mean_ci(row, m, scale))}</td>' for m, _, scale in metrics]
        cv = row.get("iops_cv")
        cells.append(f'<td class="num">{"–" if cv is None or pd.isna(cv) else f"{float(cv):.1%}"}</td>')
        cells.append(f"<td>{_e(', '.join(flags))}</td>")
        rows.append(f'<tr class="{"flag" if flags else ""}">{"".join(cells)}</tr>')
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    note = (
        "<p>Mean over repeats ± the 95 % confidence half-width (t distribution); jobs summed per point.</p>"
    )
    return f"{note}<table><tr>{header}</tr>{''.join(rows)}</table>"


def _plain(value: object) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):  # type: ignore[call-overload]
        return "–"
    return str(value)


def _problems_table(frame: pd.DataFrame) -> str:
    if "status" not in frame:
        return ""
    bad = frame[frame["status"] != "ok"].drop_duplicates(["point", "repeat"])
    if bad.empty:
        return ""
    rows = "".join(
        f"<tr><td>{_e(r.point)}</td><td>{_e(r.repeat)}</td><td>{_e(r.status)}</td><td>{_e(_plain(r.reason))}</td></tr>"
        for r in bad.itertuples()
    )
    return (
        "<h3>Points that did not finish ok</h3>"
        f"<table><tr><th>point</th><th>repeat</th><th>status</th><th>reason</th></tr>{rows}</table>"
    )


def _machine_table(manifest: dict[str, Any]) -> str:
    machine = manifest.get("machine") or {}
    fields = (
        ("host", "host"),
        ("kernel", "kernel"),
        ("cpu_model", "CPU"),
        ("cpu_count", "CPUs"),
        ("fio_version", "fio"),
        ("numactl_version", "numactl"),
        ("iobench_version", "iobench"),
        ("python", "Python"),
    )
    rows = [f"<tr><th>{label}</th><td>{_e(machine.get(key, '–'))}</td></tr>" for key, label in fields]
    topology = machine.get("topology") or {}
    for node in topology.get("nodes", []):
        rows.append(
            f"<tr><th>NUMA node {_e(node.get('id'))}</th><td>CPUs {_e(_cpus(node.get('cpus', [])))}"
            f" · distances {_e(node.get('distances'))}</td></tr>"
        )
    threads = sorted({len(c.get("cpus", [])) for c in topology.get("cores", [])})
    if threads:
        rows.append(
            f"<tr><th>cores</th><td>{len(topology['cores'])}, {'/'.join(map(str, threads))} threads each</td></tr>"
        )
    return f"<table>{''.join(rows)}</table>"


def _cpus(cpus: Sequence[int]) -> str:
    from iobench.cpulist import format_cpulist

    return format_cpulist(tuple(cpus)) or "–"


def _targets_table(manifest: dict[str, Any]) -> str:
    targets = (manifest.get("machine") or {}).get("targets") or []
    if not targets:
        return ""
    rows = []
    for target in targets:
        disks = target.get("disks") or []
        described = "; ".join(
            f"{d.get('name')} {d.get('model') or ''} ({_size(d.get('size_bytes'))}), node {_node(d.get('numa_node'))}, "
            f"scheduler {d.get('scheduler')}, readahead {d.get('readahead_kb')} KiB"
            for d in disks
        )
        rows.append(
            f"<tr><td>{_e(target.get('path'))}</td><td>{_e(target.get('kind'))}</td>"
            f"<td>{_e(_node(target.get('home_node')))}</td><td>{_e(described or '–')}</td></tr>"
        )
    return (
        "<h3>Targets (device settings as found before the run)</h3>"
        "<table><tr><th>path</th><th>kind</th><th>home node</th><th>disks</th></tr>"
        f"{''.join(rows)}</table>"
    )


def _node(value: object) -> str:
    return "unknown" if value is None else str(value)


def _size(value: object) -> str:
    if not isinstance(value, int) or value <= 0:
        return "size unknown"
    return f"{value / 2**30:,.1f} GiB" if value >= 2**30 else f"{value / 2**20:,.0f} MiB"
