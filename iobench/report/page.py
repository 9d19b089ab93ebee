"""``iobench report``: every figure that fits a run, and one self-contained HTML page about it.

The page needs nothing but itself to open offline: figures are inline PNGs,
the style is inline, there is no script. It holds the figures, a summary table
(mean ± 95 % CI per point), the points that did not run or failed and why, the
points that were not steady (with their throughput and latency over time), the
machine (host, kernel, CPU, software versions, NUMA nodes), each target's
devices with their original settings, and the matrix as given.

The summary is data first: :func:`iobench.summarize` of the run, written as
``summary.csv`` beside the page, whose table shows those same numbers. The page
comes from the jinja2 template ``iobench/report/templates/report.html.j2`` with
autoescaping on: names, descriptions, reasons and paths are user text.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import NextStep, ResultsError, RunStorageError
from iobench.matrix.display import format_value
from iobench.plots.files import save_figure_file
from iobench.report.findings import validity_flags, validity_section
from iobench.report.html import inline_png, template
from iobench.report.verdicts import HEADER as VERDICT_HEADER
from iobench.report.verdicts import verdict_groups
from iobench.results.points import parameter_columns, summarize
from iobench.results.rundir import load
from iobench.results.telemetry import telemetry
from iobench.store.records import Manifest
from iobench.store.rundir import RunDir, remedy, replacing, storage

SUMMARY_METRICS = (
    ("iops", "IOPS", 1.0),
    ("bw_bytes", "MiB/s", 1 / 2**20),
    ("lat_mean_us", "mean lat µs", 1.0),
    ("clat_p99_us", "p99 clat µs", 1.0),
    ("cpu_us_per_io", "CPU µs/I/O", 1.0),
)


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote: the HTML page, the figure files and the summary table."""

    html: Path
    figures: list[Path]
    summary: Path | None = None


def write_report(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    formats: Sequence[str] = ("png",),
) -> Report:
    """Draw every figure that fits the run; write ``summary.csv`` and ``report.html`` beside them.

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
    from iobench.plots.timeline import unsteady_timeline

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"unknown figure format {unknown[0]!r}; use one of {', '.join(FORMATS)}")
    run = RunDir.open(run_dir)
    frame = load(run.path)
    target = Path(out) if out is not None else run.path / "report"
    figures = figures_for(frame, telemetry(run))
    not_steady = unsteady_timeline(run.path, frame)
    if not_steady is not None:
        figures["timeline-not-steady"] = not_steady
    written: list[Path] = []
    inline: list[tuple[str, str]] = []
    try:
        with storage(target):
            target.mkdir(parents=True, exist_ok=True)
        for name, fig in figures.items():
            written += [save_figure_file(fig, target / f"{name}.{fmt}") for fmt in formats]
            inline.append((name, inline_png(fig)))
        summary = summarize(frame, by=_split_by(frame))
        table = target / "summary.csv"
        with replacing(table) as tmp:
            summary.to_csv(tmp, index=False)
        page = target / "report.html"
        text = render_page(run, frame, inline, summary)
        with replacing(page) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except RunStorageError as fault:
        fault.what = f"report not written: {fault.what}"
        fault.run_dir = str(run.path)
        fault.kept = f"the run is unchanged ({run.path}); figures written before the fault: {len(written)}"
        fault.remedy = remedy(fault)
        fault.steps = [NextStep("report", run_dir=str(run.path), out=None if out is None else os.fspath(out))]
        raise
    return Report(page, written, table)


def render_page(
    run: RunDir,
    frame: pd.DataFrame,
    figures: Iterable[tuple[str, str]],
    summary: pd.DataFrame | None = None,
) -> str:
    """The HTML text: title, counts, figures (base64 PNG), summary, bottlenecks, problems, machine, targets, matrix.

    Parameters
    ----------
    run
        The run directory.
    frame
        Its tidy frame.
    figures
        ``(name, base64 PNG)`` pairs, in page order.
    summary
        :func:`iobench.summarize` of ``frame`` (computed when omitted): the table shows its numbers.
    """
    manifest = run.manifest()
    matrix_path = run.path / "matrix.yaml"
    matrix_text = matrix_path.read_text(errors="replace") if matrix_path.is_file() else ""
    return template("report.html.j2").render(
        title=run.path.name,
        description=_description(manifest, matrix_text),
        counts=_counts(manifest, frame),
        when=" → ".join(str(when) for when in (manifest.started, manifest.finished) if when),
        figures=list(figures),
        summary=_summary_table(
            summarize(frame, by=_split_by(frame)) if summary is None else summary, validity_flags(frame)
        ),
        verdicts=verdict_groups(frame),
        verdict_header=VERDICT_HEADER,
        problems=_problems(frame),
        unsteady=_unsteady(frame),
        validity=validity_section(frame),
        machine=_machine_rows(manifest),
        targets=_target_rows(manifest),
        hosts=_host_sections(manifest),
        matrix=matrix_text,
    )


def _description(manifest: Manifest, matrix_text: str) -> str:
    for line in matrix_text.splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip()
    return manifest.name


def _counts(manifest: Manifest, frame: pd.DataFrame) -> list[tuple[str, int]]:
    counts = manifest.counts
    if not counts and "status" in frame:
        per_point = frame.drop_duplicates(["point", "repeat"])["status"]
        counts = {str(k): int(v) for k, v in per_point.value_counts().items()}
    return sorted((str(status), int(n)) for status, n in counts.items())


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


def _summary_table(summary: pd.DataFrame, validity: dict[object, list[str]] | None = None) -> dict[str, Any]:
    """The summary's rows as the page shows them: identifying columns, then mean ± CI per metric.

    ``validity``: per point, the validity codes found in its repeats, shown among its flags.
    """
    if summary.empty:
        return {"rows": []}
    stats = [c for c in summary.columns if c.endswith(("_mean", "_std", "_ci95", "_cv"))]
    fixed = {"n", "pct_exact", "noisy", "short_runtime", "unsteady", *stats}
    keys = [
        c
        for c in summary.columns
        if c not in fixed and (c in ("point", "direction", "target") or summary[c].nunique(dropna=False) > 1)
    ]
    metrics = [(m, title, scale) for m, title, scale in SUMMARY_METRICS if f"{m}_mean" in summary]
    rows = []
    for _, row in summary.iterrows():
        flags = [name for name in ("noisy", "short_runtime") if row.get(name) is True]
        if row.get("pct_exact") is False:
            flags.append("approx. percentiles")
        unsteady = row.get("unsteady")
        if unsteady is not None and not pd.isna(unsteady) and int(unsteady) > 0:
            flags.append(f"not steady ({int(unsteady)} of {int(row['n'])})")
        flags += (validity or {}).get(row.get("point"), [])
        cv = row.get("iops_cv")
        numbers = [str(int(row["n"]))] + [_mean_ci(row, m, scale) for m, _, scale in metrics]
        numbers.append("–" if cv is None or pd.isna(cv) else f"{float(cv):.1%}")
        rows.append(
            {
                "labels": [format_value(k, row[k], missing="–") for k in keys],
                "numbers": numbers,
                "flags": flags,
            }
        )
    return {
        "header": [*keys, "n", *(title for _, title, _ in metrics), "CV (IOPS)", "flags"],
        "rows": rows,
        "approximate": bool(summary["pct_exact"].eq(False).any()),
        "csv": "summary.csv",
    }


def _plain(value: object) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):  # type: ignore[call-overload]
        return "–"
    return str(value)


def _problems(frame: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    if "status" not in frame:
        return []
    bad = frame[frame["status"] != "ok"].drop_duplicates(["point", "repeat"])
    return [(_plain(r.point), _plain(r.repeat), _plain(r.status), _plain(r.reason)) for r in bad.itertuples()]


def _unsteady(frame: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """Point, repeat, parameters and reason of every repeat judged not steady."""
    if "steady" not in frame:
        return []
    bad = frame[frame["steady"].astype("boolean").eq(False).fillna(False)].drop_duplicates(
        ["point", "repeat"]
    )
    params = [c for c in parameter_columns(frame) if frame[c].nunique(dropna=False) > 1]
    return [
        (
            _plain(r["point"]),
            _plain(r["repeat"]),
            " ".join(f"{c}={format_value(c, r[c], missing='–')}" for c in params) or "–",
            _plain(r.get("steady_reason")),
        )
        for _, r in bad.iterrows()
    ]


def _split_by(frame: pd.DataFrame) -> list[str] | None:
    """``["host"]`` when every point ran on one host of several (the ``host`` axis): the table then names it."""
    if "host" not in frame or frame["host"].nunique(dropna=True) < 2:
        return None
    keys = [c for c in ("run_id", "point") if c in frame]
    return ["host"] if keys and frame.groupby(keys)["host"].nunique().max() == 1 else None


def _host_sections(manifest: Manifest) -> list[dict[str, Any]]:
    """Per host of a sweep across hosts (SPEC §11): its machine facts and its targets."""
    fields = (
        ("hostname", "hostname"),
        ("ssh", "ssh"),
        ("kernel", "kernel"),
        ("cpu_model", "CPU"),
        ("cpu_count", "CPUs"),
        ("fio_version", "fio"),
        ("numactl", "numactl"),
    )
    sections = []
    for host in manifest.hosts:
        rows = _with_topology(host, [(label, str(host.get(key) or "–")) for key, label in fields])
        sections.append(
            {"name": str(host.get("host")), "rows": rows, "targets": _targets(host.get("targets") or [])}
        )
    return sections


def _machine_rows(manifest: Manifest) -> list[tuple[str, str]]:
    machine = manifest.machine.facts()
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
    rows = [(label, str(machine.get(key, "–"))) for key, label in fields]
    # `iobench system show` when the run started (docs/validity.md)
    rows += [
        (str(s.get("label")), f"{s.get('value')} ({s.get('verdict')}: {s.get('note')})")
        for s in machine.get("system") or []
        if isinstance(s, dict)
    ]
    return _with_topology(machine, rows)


def _with_topology(machine: dict[str, Any], rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    topology = machine.get("topology") or {}
    for node in topology.get("nodes", []):
        rows.append(
            (
                f"NUMA node {node.get('id')}",
                f"CPUs {_cpus(node.get('cpus', []))} · distances {node.get('distances')}",
            )
        )
    threads = sorted({len(c.get("cpus", [])) for c in topology.get("cores", [])})
    if threads:
        rows.append(("cores", f"{len(topology['cores'])}, {'/'.join(map(str, threads))} threads each"))
    return rows


def _cpus(cpus: Sequence[int]) -> str:
    from iobench.system.cpulist import format_cpulist

    return format_cpulist(tuple(cpus)) or "–"


def _target_rows(manifest: Manifest) -> list[tuple[str, str, str, str]]:
    return _targets(manifest.machine.targets)


def _targets(targets: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    rows = []
    for target in targets:
        disks = target.get("disks") or []
        described = "; ".join(
            f"{d.get('name')} {d.get('model') or ''} ({_size(d.get('size_bytes'))}), node {_node(d.get('numa_node'))}, "
            f"scheduler {d.get('scheduler')}, readahead {d.get('readahead_kb')} KiB"
            for d in disks
        )
        rows.append(
            (
                str(target.get("path")),
                str(target.get("kind")),
                _node(target.get("home_node")),
                described or "–",
            )
        )
    return rows


def _node(value: object) -> str:
    return "unknown" if value is None else str(value)


def _size(value: object) -> str:
    if not isinstance(value, int) or value <= 0:
        return "size unknown"
    return f"{value / 2**30:,.1f} GiB" if value >= 2**30 else f"{value / 2**20:,.0f} MiB"
