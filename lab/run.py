"""One lab run on the host: set up, boot the guest, let it sweep, then check and report what came back."""

from __future__ import annotations

import html
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import IobenchError
from iobench.report.page import write_report
from lab import machine
from lab.checks import Check, run_checks

# About 5 minutes on an idle host; 20 on a 2-CPU host shared with other work (load 12).
BOOT_TIMEOUT_S = 2400.0


@dataclass(frozen=True)
class LabRun:
    out: Path
    qemu_returncode: int
    seconds: float
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return self.qemu_returncode == 0 and bool(self.checks) and all(c.passed for c in self.checks)


def run_lab(results: Path, *, timeout: float = BOOT_TIMEOUT_S) -> LabRun:
    """Boot the lab guest, run the sweeps in it, and leave everything in ``results/lab-<stamp>/``.

    Raises
    ------
    machine.LabUnavailable
        When this machine cannot run the lab: qemu missing and no root or apt to
        install it, or no network to download the guest kernel.
    machine.LabError
        When the harness itself fails (unpacking the kernel, building the
        initramfs, checking or reporting what came back), with the logs.
    """
    machine.ensure_packages()
    kernel = machine.fetch_kernel()
    initramfs = machine.build_initramfs(kernel, machine.CACHE)
    out = results / time.strftime("lab-%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="iobench-lab-") as scratch:
        disks = machine.make_disks(Path(scratch))
        argv = machine.qemu_argv(
            kernel, initramfs, disks, out, python=sys.executable, accel=machine.accelerator()
        )
        (out / "qemu-argv.json").write_text(json.dumps(argv, indent=1) + "\n")
        returncode = machine.boot(argv, timeout=timeout, log=out / "qemu.log")
    seconds = time.monotonic() - started
    try:
        checks = run_checks(out)
        (out / "checks.json").write_text(
            json.dumps([c.to_dict() for c in checks], indent=2) + "\n", encoding="utf-8"
        )
        write_index(out, checks, reports(out))
    except Exception as exc:
        raise machine.LabError(
            f"checking the guest's output failed: {type(exc).__name__}: {exc}\n{guest_logs(out)}"
        ) from exc
    return LabRun(out, returncode, seconds, checks)


def guest_logs(out: Path, chars: int = 3000) -> str:
    """The end of each log a lab run leaves: QEMU's output, the serial console, the guest's own log."""
    parts = []
    for name in ("qemu.log", "console.log", "guest.log"):
        path = out / name
        text = path.read_text(errors="replace")[-chars:] if path.is_file() else "(absent)"
        parts.append(f"--- {path} ---\n{text.rstrip()}")
    return "\n".join(parts)


def reports(out: Path) -> list[Path]:
    """``iobench report`` of every run that came back (a run that cannot be reported is left out)."""
    pages = []
    for run_dir in sorted((out / "runs").glob("*/")):
        try:
            pages.append(write_report(run_dir).html)
        except IobenchError:
            continue
    return pages


def write_index(out: Path, checks: list[Check], pages: list[Path]) -> Path:
    """``index.html``: the checks, and a link to each run's report."""
    rows = "".join(
        f"<tr><td>{'ok' if c.passed else '<b>FAIL</b>'}</td><td>{html.escape(c.name)}</td>"
        f"<td><pre>{html.escape(c.detail)}</pre></td></tr>"
        for c in checks
    )
    links = "".join(
        f'<li><a href="{html.escape(str(p.relative_to(out)))}">{html.escape(p.parent.parent.name)}</a></li>'
        for p in pages
    )
    index = out / "index.html"
    index.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>iobench lab</title></head><body>'
        "<h1>iobench lab: an emulated 2-socket × 2-core × 2-thread machine</h1>"
        "<p>QEMU under emulation: placement, topology, device settings and safety are real; "
        "performance numbers mean nothing.</p>"
        f"<h2>Checks</h2><table>{rows}</table><h2>Runs</h2><ul>{links}</ul></body></html>\n",
        encoding="utf-8",
    )
    return index
