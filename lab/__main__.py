"""``python -m lab [RESULTS]`` (``make lab``): boot the lab guest, sweep in it, check and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.machine import LabError, LabUnavailable
from lab.run import run_lab


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"), help="parent folder")
    args = parser.parse_args(argv)
    print("lab: setting up (qemu, kernel, initramfs), then booting the guest; a few minutes under emulation")
    try:
        lab = run_lab(args.results)
    except LabUnavailable as exc:
        print(f"lab: cannot run here: {exc}", file=sys.stderr)
        return 2
    except LabError as exc:
        print(f"lab: the harness failed: {exc}", file=sys.stderr)
        return 1
    for crash in lab.crashes:
        print(f"lab: booted again: {crash}")
    for check in lab.checks:
        print(f"  {'ok  ' if check.passed else 'FAIL'} {check.name}: {check.detail.splitlines()[0]}")
    print(f"lab: {lab.out} ({lab.seconds:.0f} s, qemu exit {lab.qemu_returncode})")
    return 0 if lab.passed else 1


if __name__ == "__main__":
    sys.exit(main())
