"""Markers, shared fixtures and the fake fio used across the tests.

Where this machine lacks what a marked test needs (root, loop devices, fio, a
second NUMA node), the test skips with the reason. With ``CI`` set (``CI=true``,
as CI services do) a skip is a failure instead: CI provides everything
``make deps`` installs, so a test that cannot run there is a broken set-up or a
broken harness, never "not here". Expected failures (``xfail``, strict) keep
their meaning everywhere.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from iobench.system.process import Completed

pytest_plugins = ("loopdev", "netns_hosts")

IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
# Every skip seen this session (test id, reason): under CI, any one of them fails the run.
_SKIPS: list[tuple[str, str]] = []


# `IOBENCH_TEST_WITHOUT=fio` (names separated by commas) runs the session with those programs off
# PATH: the fast lane runs that way, so a test that needs fio without its marker fails there.
HIDDEN_PROGRAMS = frozenset(
    name.strip() for name in os.environ.get("IOBENCH_TEST_WITHOUT", "").split(",") if name.strip()
)


def path_without(programs: frozenset[str], folder: Path, path: str) -> str:
    """A PATH of one folder holding a link to every program on ``path`` but ``programs``.

    Each name links to its first match on ``path``, as a lookup would find it, so what stays on
    PATH resolves exactly as before.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for entry in path.split(os.pathsep):
        if not entry or not Path(entry).is_dir():
            continue
        for program in os.scandir(entry):
            link = folder / program.name
            if program.name in programs or link.is_symlink() or program.is_dir():
                continue
            if os.access(program.path, os.X_OK):
                link.symlink_to(program.path)
    return str(folder)


def pytest_configure(config: pytest.Config) -> None:
    if HIDDEN_PROGRAMS:
        folder = Path(tempfile.mkdtemp(prefix="iobench-path-"))
        os.environ["PATH"] = path_without(HIDDEN_PROGRAMS, folder / "bin", os.environ.get("PATH", ""))
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def host_numa_nodes() -> int:
    """NUMA nodes of this machine as the kernel lists them (1 where sysfs shows none)."""
    return max(1, len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out ``multinode`` tests unless asked; skip, with the reason, tests whose needs are missing here."""
    if "multinode" not in (config.getoption("markexpr", "") or ""):
        # Two NUMA nodes on the host is what a CI or developer VM never has: such tests run only
        # where asked for (`pytest -m multinode` on a multi-socket machine); the lab covers two nodes.
        left_out = [item for item in items if "multinode" in item.keywords]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if "multinode" not in item.keywords]
    is_root = os.geteuid() == 0
    has_fio = shutil.which("fio") is not None
    has_losetup = shutil.which("losetup") is not None and Path("/dev/loop-control").exists()
    nodes = host_numa_nodes()
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root"))
        if "loopdev" in item.keywords and not (is_root and has_losetup):
            item.add_marker(
                pytest.mark.skip(reason="needs root and loop devices (losetup, /dev/loop-control)")
            )
        if "fio" in item.keywords and not has_fio:
            item.add_marker(pytest.mark.skip(reason="needs fio on PATH (make test installs it)"))
        if "multinode" in item.keywords and nodes < 2:
            item.add_marker(
                pytest.mark.skip(reason=f"needs two NUMA nodes on the host, this one has {nodes} (make lab)")
            )


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI a skip (marker, ``pytest.skip``, a fixture's skip) is reported as a failure with its reason.

    This wrapper runs outermost, after pytest's own skipping plugin: an xfail
    reads as skipped with ``wasxfail`` set and is left alone, and a strict xfail
    that passed is already a failure.
    """
    report = yield
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (
            f"skipped, and with CI set a skip is a failure (make deps installs what tests need): {reason}"
        )
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPS.append((report.nodeid, _skip_reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a whole module skipped at import (allow_module_level)
        _SKIPS.append((report.nodeid, _skip_reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The backstop: under CI, a run in which anything was skipped does not pass."""
    if IN_CI and _SKIPS and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if IN_CI and _SKIPS:
        terminalreporter.section("skipped under CI (each one fails the run)", sep="=", red=True)
        for nodeid, reason in _SKIPS:
            terminalreporter.line(f"{nodeid}: {reason}")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    import matplotlib

    if "matplotlib.pyplot" in matplotlib.sys.modules:  # type: ignore[attr-defined]
        import matplotlib.pyplot as plt

        plt.close("all")


@pytest.fixture(scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, _cache_dir: Path
) -> None:
    """Keep iobench's state (created-files registry) and cache out of the real home directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_cache_dir))


@pytest.fixture
def write_matrix(tmp_path: Path) -> Callable[..., Path]:
    """Write a matrix file from YAML text (dedented) and return its path."""

    def write(text: str, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


NULL_MATRIX = """
version: 1
name: nulltest
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  runtime: 1
  time_based: 1
  bs: 4k
matrix:
  iodepth: [1, 2]
  numjobs: [1, 2]
"""


@pytest.fixture
def null_matrix(write_matrix: Callable[..., Path], tmp_path: Path) -> Callable[..., Path]:
    """A fast real-fio matrix (null engine, 1 s points) on a file in tmp_path; extra YAML appended."""

    def make(extra: str = "", **fields: str) -> Path:
        text = NULL_MATRIX.format(target=tmp_path / "target.dat")
        for key, value in fields.items():
            text = text.replace(f"{key}: ", f"{key}: {value}  # ", 1) if f"\n  {key}: " in text else text
        return write_matrix(text + textwrap.dedent(extra))

    return make


FIO_GOLDEN = Path(__file__).parent / "data" / "fio" / "fio-3.33" / "read.json"


class FakeFio:
    """An executor for ``iobench.run(..., executor=)`` that stands in for fio.

    Each call writes ``output`` (default: a real fio-3.33 JSON of one read job)
    where fio's ``--output=`` says, or, on the chosen call numbers (1-based),
    fails like fio on an I/O error, times out, or is interrupted (Ctrl-C).
    ``calls`` keeps every argv. Loading a matrix still asks the real fio for its
    options; only the runs are fake.
    """

    def __init__(
        self,
        fail: set[int] = frozenset(),
        timeout: set[int] = frozenset(),  # noqa: B006
        interrupt: int | None = None,
        output: Path = FIO_GOLDEN,
    ) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail, self.timeout, self.interrupt = fail, timeout, interrupt
        self.output = output.read_text()

    def __call__(self, argv: tuple[str, ...], *, cwd: Path, **kwargs: Any) -> Completed:
        self.calls.append(tuple(argv))
        n = len(self.calls)
        if n == self.interrupt:
            raise KeyboardInterrupt
        output = next(a for a in argv if a.startswith("--output=")).removeprefix("--output=")
        if n in self.fail:
            return Completed(
                tuple(argv),
                1,
                "",
                "fio: pid=1, err=5/file:io_u.c:1, func=io_u error, error=EIO\n",
                0.1,
                False,
            )
        if n in self.timeout:
            return Completed(tuple(argv), -15, "", "", 0.1, True)
        (Path(cwd) / output).write_text(self.output)
        return Completed(tuple(argv), 0, "", "", 0.1, False)


@pytest.fixture
def fake_fio() -> type[FakeFio]:
    """The :class:`FakeFio` class: ``fake_fio(fail={2})`` builds an executor for ``run(..., executor=)``."""
    return FakeFio
