"""One lab run on the host: set up, boot the guest, let it sweep, then check and report what came back."""

from __future__ import annotations

import html
import json
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from iobench.errors import IobenchError
from iobench.report.page import write_report
from lab import machine
from lab.checks import Check, run_checks

# About 5 minutes on an idle host; 20 on a 2-CPU host shared with other work (load 12).
BOOT_TIMEOUT_S = 2400.0
#: Fresh boots after QEMU itself crashes (dies of a signal); a crash of ours is the guest's, not QEMU's.
QEMU_CRASH_RETRIES = 1


@dataclass(frozen=True)
class LabRun:
    out: Path
    qemu_returncode: int
    seconds: float
    checks: list[Check]
    crashes: list[str] = field(default_factory=list)
    """QEMU crashes before the boot that gave these results, each with where its logs were kept."""

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
    crashes: list[str] = []
    while True:
        out.mkdir(parents=True)
        started = time.monotonic()
        returncode = _boot(kernel, initramfs, out, timeout)
        seconds = time.monotonic() - started
        if returncode >= 0 or len(crashes) == QEMU_CRASH_RETRIES:
            break
        # Killed by a signal, not by our timeout (124): QEMU itself crashed (TCG has rare races
        # of its own, a SIGSEGV in memory_region_dispatch_write seen once). Boot a fresh guest.
        kept = out.with_name(f"{out.name}-qemu-crash-{len(crashes) + 1}")
        out.rename(kept)
        crashes.append(f"QEMU died of {_signal_name(-returncode)} after {seconds:.0f} s; its logs: {kept}")
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
    return LabRun(out, returncode, seconds, checks, crashes)


def _boot(kernel: machine.Kernel, initramfs: Path, out: Path, timeout: float) -> int:
    with tempfile.TemporaryDirectory(prefix="iobench-lab-") as scratch:
        disks = machine.make_disks(Path(scratch))
        argv = machine.qemu_argv(
            kernel, initramfs, disks, out, python=sys.executable, accel=machine.accelerator()
        )
        (out / "qemu-argv.json").write_text(json.dumps(argv, indent=1) + "\n")
        return machine.boot(argv, timeout=timeout, log=out / "qemu.log")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


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
