"""``iobench report``: every figure that fits a run, and one self-contained HTML page about it.

The page needs nothing but itself to open offline: figures are inline PNGs,
the style is inline, there is no script. It holds how far the run got (and
the command that finishes an incomplete one), the notes made while loading it
(damaged points, files that cannot be read), the figures, a summary table
(mean ± 95 % CI per point), the points that did not run or failed and why, the
points that were not steady (with their throughput and latency over time), the
machine (host, kernel, CPU, software versions, NUMA nodes), each target's
devices with their original settings, and the matrix as given. Per-point
tables are summarised (counted per status, finding or verdict) with their rows
folded in ``<details>``, so a sweep reads in a 1,400-px window; a figure the
run does not fit is left out with a line saying why (docs/figures.md).

The summary is data first: :func:`iobench.summarize` of the run, written as
``summary.csv`` beside the page, whose table shows those same numbers. A
table longer than :data:`MAX_ROWS` shows its first rows and links its CSV
file (``summary.csv``, ``bottlenecks.csv``, ``problems.csv``,
``unsteady.csv``), so a sweep of thousands of points still makes a page a
browser opens. Each figure is drawn once: the page inlines the PNG file
written beside it. The page comes from the jinja2 template
``iobench/report/templates/report.html.j2`` with autoescaping on: names,
descriptions, reasons and paths are user text.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from iobench.errors import NextStep, ResultsError, RunStorageError
from iobench.matrix.display import format_value
from iobench.plots.files import save_figure_file
from iobench.report.findings import VALIDITY_COLUMNS, validity_flags, validity_section, with_validity
from iobench.report.hostnotes import outlier_section, summed_by
from iobench.report.html import inline_png, template
from iobench.report.runstate import run_lines
from iobench.report.verdicts import HEADER as VERDICT_HEADER
from iobench.report.verdicts import folded, verdict_groups
from iobench.results.loading import Loaded, open_run
from iobench.results.points import outcomes, parameter_columns, shared_totals, summarize
from iobench.results.steady import unjudged_line
from iobench.results.telemetry import telemetry
from iobench.store.records import Manifest
from iobench.store.rundir import RunDir, remedy, replacing, storage
from iobench.store.untrusted import MATRIX, csv_safe, own_directory, read_text
from iobench.words import counted

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: A page table longer than this shows its first rows and links the CSV file with all of them.
MAX_ROWS = 200

SUMMARY_METRICS = (
    ("iops", "IOPS", 1.0),
    ("bw_bytes", "MiB/s", 1 / 2**20),
    ("lat_mean_us", "mean lat µs", 1.0),
    ("clat_p99_us", "p99 clat µs", 1.0),
    ("cpu_us_per_io", "CPU µs/I/O", 1.0),
)


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote: the HTML page, the figure files and the summary table.

    ``run``: how far the run got (:meth:`RunState.facts <iobench.store.inventory.RunState.facts>`);
    ``notes``: what was noted while loading it (as on the page); ``left_out``: ``(name, why)`` of
    each figure that does not fit the run (the page says why, the other figures are drawn).
    """

    html: Path
    figures: list[Path]
    summary: Path | None = None
    run: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)


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
        When ``run_dir`` is not a run directory (a frame file: the message says
        what to give instead), ``out`` is a file, or a format is unknown.
    RunStorageError
        When a file cannot be written (disk full, read-only...); no file is
        left half written under its final name.
    """
    from iobench.plots.figures import FORMATS

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"unknown figure format {unknown[0]!r}; use one of {', '.join(FORMATS)}")
    if Path(run_dir).is_file():
        raise ResultsError(
            f"{run_dir}: a file; `iobench report` takes a run directory (made by `iobench run`). "
            "For a frame saved by `iobench parse -o`, draw figures with `iobench plot FRAME KIND -o FILE`"
        )
    target = Path(out) if out is not None else Path(run_dir) / "report"
    if target.exists() and not target.is_dir():
        raise ResultsError(
            f"-o {target}: a file is there; give a directory (made when missing) for the report"
        )
    run = RunDir.open(run_dir)
    loaded = open_run(run.path)
    # The figures, the summary and the bottleneck tables all start from the point totals.
    with shared_totals():
        return _write(run, loaded, target, formats, out)


def _write(
    run: RunDir, loaded: Loaded, target: Path, formats: Sequence[str], out: str | os.PathLike[str] | None
) -> Report:
    """:func:`write_report` once its arguments are checked and the run opened."""
    from iobench.plots.figures import figure_builders
    from iobench.plots.latheatmap import report_heatmap
    from iobench.plots.timeline import unsteady_timeline

    frame = loaded.frame
    builders: dict[str, Callable[[], Figure | None]] = dict(figure_builders(frame, telemetry(run)))
    builders["timeline-not-steady"] = lambda: unsteady_timeline(run.path, frame)
    builders["lat-heatmap"] = lambda: report_heatmap(run.path)
    written: list[Path] = []
    inline: list[tuple[str, str]] = []
    left_out: list[tuple[str, str]] = []
    try:
        with storage(target):
            own_directory(target)
        for name, build in builders.items():
            try:
                fig = build()  # one figure at a time: drawn, written, inlined, let go
            except ResultsError as refused:  # a figure that does not fit this run is one line, not the end
                left_out.append((name, str(refused)))
                continue
            if fig is None:
                continue
            files = [save_figure_file(fig, target / f"{name}.{fmt}") for fmt in formats]
            written += files
            png = next((f for f in files if f.suffix == ".png"), None)
            inline.append((name, base64.b64encode(png.read_bytes()).decode() if png else inline_png(fig)))
        summary = with_validity(summarize(frame, by=_split_by(frame)), frame)
        table = target / "summary.csv"
        with replacing(table) as tmp:
            csv_safe(summary).to_csv(tmp, index=False)
        page = target / "report.html"
        text = render_page(run, frame, inline, summary, loaded=loaded, out=target, left_out=left_out)
        with replacing(page) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except RunStorageError as fault:
        fault.what = f"report not written: {fault.what}"
        fault.run_dir = str(run.path)
        fault.kept = f"the run is unchanged ({run.path}); figures written before the fault: {len(written)}"
        fault.remedy = remedy(fault)
        fault.steps = [NextStep("report", run_dir=str(run.path), out=None if out is None else os.fspath(out))]
        raise
    return Report(page, written, table, loaded.state.facts(), list(loaded.notes), left_out)


def render_page(
    run: RunDir,
    frame: pd.DataFrame,
    figures: Iterable[tuple[str, str]],
    summary: pd.DataFrame | None = None,
    *,
    loaded: Loaded | None = None,
    out: Path | None = None,
    left_out: Iterable[tuple[str, str]] = (),
) -> str:
    """The HTML text: title, counts, how far the run got, figures (base64 PNG), summary, problems, machine, matrix.

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
    loaded
        What :func:`~iobench.results.loading.open_run` gave for the run (read when omitted).
    out
        Where the page goes: the full tables too long for the page are written there as CSV.
    left_out
        ``(name, why)`` of each figure that does not fit the run, said on the page.
    """
    manifest = run.manifest()
    loaded = loaded if loaded is not None else open_run(run.path)
    try:
        matrix_text = read_text(run.path / "matrix.yaml", MATRIX, run.path)
    except FileNotFoundError:
        matrix_text = ""
    except OSError as exc:  # not read (a link, a FIFO, too large): the page says why in its place
        matrix_text = f"(not shown: {exc.filename}: {exc.strerror})"
    facts = loaded.state.facts()
    full = with_validity(summarize(frame, by=_split_by(frame)), frame) if summary is None else summary
    bottlenecks = verdict_groups(frame)
    problems = _problems(frame)
    unsteady = _unsteady(frame)
    validity = validity_section(frame)
    return template("report.html.j2").render(
        title=run.path.name,
        description=_description(manifest, matrix_text),
        counts=_counts(frame),
        skipped=_skipped(frame),
        when=" → ".join(str(when) for when in (manifest.started, manifest.finished) if when),
        state=run_lines(facts, []),
        notes=[*loaded.notes, *filter(None, [unjudged_line(frame)])],
        figures=list(figures),
        left_out=list(left_out),
        summary=summary_table(full, validity_flags(frame), _repeats_of(unsteady)),
        verdicts=_bounded_groups(bottlenecks, out),
        verdict_header=VERDICT_HEADER,
        problems={
            **_bounded(problems, ("point", "repeat", "status", "reason"), out, "problems.csv"),
            "grouped": _grouped(problems, lambda r: (r[2], r[3])),
        },
        unsteady={
            **_bounded(unsteady, ("point", "repeat", "parameters", "why"), out, "unsteady.csv"),
            "points": len({r[0] for r in unsteady}),
        },
        validity={
            **validity,
            "grouped": _grouped(validity["rows"], lambda r: (r[3],)),
        },
        outliers=outlier_section(frame),
        machine=_machine_rows(manifest),
        targets=_target_rows(manifest),
        hosts=_host_sections(manifest),
        matrix=matrix_text,
    )


def _write_csv(out: Path | None, name: str, rows: pd.DataFrame) -> str | None:
    """Write ``rows`` as ``out/name``; the name to link, or None when there is nowhere to write."""
    if out is None:
        return None
    with replacing(out / name) as tmp:
        csv_safe(rows).to_csv(tmp, index=False)
    return name


def _bounded(
    rows: Sequence[tuple[str, ...]], header: Sequence[str], out: Path | None, name: str
) -> dict[str, Any]:
    """A page table: at most :data:`MAX_ROWS` rows, and the CSV of all of them when there are more."""
    csv = _write_csv(out, name, pd.DataFrame(rows, columns=list(header))) if len(rows) > MAX_ROWS else None
    return {"rows": rows[:MAX_ROWS], "total": len(rows), "csv": csv}


def _bounded_groups(groups: list[dict[str, Any]], out: Path | None) -> dict[str, Any]:
    """The bottleneck tables, cut after :data:`MAX_ROWS` rows in all, with ``bottlenecks.csv`` when cut."""
    total = sum(len(g["rows"]) for g in groups)
    csv = None
    if total > MAX_ROWS:
        records = [
            {
                "group": g["title"],
                g["x"]: r["label"],
                **dict(zip(VERDICT_HEADER, [*r["cells"], r["verdict"], r["why"]], strict=True)),
                "note": r["note"],
            }
            for g in groups
            for r in g["rows"]
        ]
        csv = _write_csv(out, "bottlenecks.csv", pd.DataFrame(records))
    shown, left = [], MAX_ROWS
    for group in groups:
        if left <= 0:
            break
        shown.append({**group, "rows": group["rows"][:left]})
        left -= len(group["rows"])
    return {**folded(shown), "total": total, "shown": min(total, MAX_ROWS), "csv": csv}


def _description(manifest: Manifest, matrix_text: str) -> str:
    for line in matrix_text.splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip()
    return manifest.name


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


def summary_table(
    summary: pd.DataFrame,
    validity: dict[object, list[str]] | None = None,
    not_steady: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The summary's rows as the page shows them: identifying columns, then mean ± CI per metric.

    ``validity``: per point, the validity codes found in its repeats, shown among its flags;
    ``not_steady``: per point (as text), its repeats judged not steady, named in its flag.
    """
    if summary.empty:
        return {"rows": []}
    stats = [c for c in summary.columns if c.endswith(("_mean", "_std", "_ci95", "_cv"))]
    fixed = {
        "n",
        "pct_exact",
        "noisy",
        "short_runtime",
        "unsteady",
        "hosts",
        "host_outliers",
        *VALIDITY_COLUMNS,
    }
    fixed |= set(stats)
    # A point's numbers that add up several hosts say so, and how many, in a column of their own.
    summed = "hosts" in summary and bool(summary["hosts"].fillna(1).gt(1).any())
    keys = [
        c
        for c in summary.columns
        if c not in fixed and (c in ("point", "direction", "target") or summary[c].nunique(dropna=False) > 1)
    ]
    metrics = [(m, title, scale) for m, title, scale in SUMMARY_METRICS if f"{m}_mean" in summary]
    rows = []
    for _, row in summary.head(MAX_ROWS).iterrows():
        flags = [name for name in ("noisy", "short_runtime") if row.get(name) is True]
        if row.get("pct_exact") is False:
            flags.append("approx. percentiles")
        unsteady = row.get("unsteady")
        if unsteady is not None and not pd.isna(unsteady) and int(unsteady) > 0:
            which = (not_steady or {}).get(_plain(row.get("point")), [])
            named = f"repeat{'s' if len(which) > 1 else ''} {', '.join(which)}" if which else int(unsteady)
            flags.append(f"not steady ({named} of {int(row['n'])})")
        flags += [c for c in (validity or {}).get(row.get("point"), []) if c not in flags]
        outliers = row.get("host_outliers")
        if isinstance(outliers, str) and outliers.strip():
            flags.append(f"hosts differ: {outliers}")
        cv = row.get("iops_cv")
        numbers = [str(int(row["n"]))] + [_mean_ci(row, m, scale) for m, _, scale in metrics]
        numbers.append("–" if cv is None or pd.isna(cv) else f"{float(cv):.1%}")
        labels = [format_value(k, row[k], missing="–") for k in keys]
        rows.append(
            {
                "labels": [*labels, summed_by(row.get("hosts"))] if summed else labels,
                "numbers": numbers,
                "flags": flags,
            }
        )
    return {
        "header": [
            *keys,
            *(["hosts"] if summed else []),
            "n",
            *(t for _, t, _ in metrics),
            "CV (IOPS)",
            "flags",
        ],
        "summed": summed,
        "rows": rows,
        "approximate": bool(summary["pct_exact"].eq(False).any()),
        "csv": "summary.csv",
        "total": len(summary),
    }


def _plain(value: object) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):  # type: ignore[call-overload]
        return "–"
    return str(value)


def _problems(frame: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    if "status" not in frame:
        return []
    bad = frame[~frame["status"].isin(["ok", "skipped"])].drop_duplicates(["point", "repeat"])
    return [(_plain(r.point), _plain(r.repeat), _plain(r.status), _plain(r.reason)) for r in bad.itertuples()]


def _skipped(frame: pd.DataFrame) -> list[Any]:
    """Points never run, once each whatever their repeats: ``(reason, points, point list)`` per reason."""
    if "status" not in frame:
        return []
    never = frame[frame["status"].eq("skipped")].drop_duplicates(["point"])
    return _grouped([(_plain(r.point), _plain(r.reason)) for r in never.itertuples()], lambda r: (r[1],))


def _counts(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The header's counts: runs by status, then points skipped and points run once as another's twin."""
    labels = {"skipped": "skipped", "same": "same as another here (run once)"}
    return [
        (labels.get(status, status), counted(n, "point" if status in labels else "run"))
        for status, n in outcomes(frame).items()
    ]


def _grouped(rows: Sequence[tuple[str, ...]], key: Callable[[tuple[str, ...]], tuple[str, ...]]) -> list[Any]:
    """Per-point rows summarised: ``(*key, points × repeats, points)`` per distinct key, most frequent first.

    A sweep's per-point tables repeat one status, reason or finding for many
    points; the page shows this summary and folds the rows themselves.
    """
    runs: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        runs.setdefault(key(row), []).append(row[0])
    ordered = sorted(runs.items(), key=lambda item: -len(item[1]))
    return [(*k, len(points), _point_list(points)) for k, points in ordered]


def _point_list(points: Sequence[str]) -> str:
    """``1, 2, 5`` for the distinct points named, or ``1, 2, 5 … (40 points)`` past ten."""
    distinct = list(dict.fromkeys(points))
    text = ", ".join(distinct[:10])
    return text if len(distinct) <= 10 else f"{text} … ({len(distinct)} points)"


def _repeats_of(rows: Sequence[tuple[str, ...]]) -> dict[str, list[str]]:
    """Per point, the repeats of ``rows`` (``(point, repeat, ...)``), in order."""
    found: dict[str, list[str]] = {}
    for point, repeat, *_ in rows:
        found.setdefault(point, []).append(repeat)
    return found


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
    """Per host of a sweep across hosts (docs/hosts.md): its machine facts and its targets."""
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
        rows = [(label, str(host.get(key) or "–")) for key, label in fields] + _setting_rows(host)
        rows = _with_topology(host, rows)
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
    return _with_topology(machine, rows + _setting_rows(machine))


def _setting_rows(machine: dict[str, Any]) -> list[tuple[str, str]]:
    """`iobench system show` of a machine (or host) when the run started (docs/validity.md)."""
    return [
        (str(s.get("label")), f"{s.get('value')} ({s.get('verdict')}: {s.get('note')})")
        for s in machine.get("system") or []
        if isinstance(s, dict)
    ]


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
