"""Markers, shared fixtures and the fake fio used across the tests."""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest_plugins = ("loopdev",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the reason, tests whose hardware or privileges are missing here."""
    is_root = os.geteuid() == 0
    has_fio = shutil.which("fio") is not None
    has_losetup = shutil.which("losetup") is not None and Path("/dev/loop-control").exists()
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root"))
        if "loopdev" in item.keywords and not (is_root and has_losetup):
            item.add_marker(
                pytest.mark.skip(reason="needs root and loop devices (losetup, /dev/loop-control)")
            )
        if "fio" in item.keywords and not has_fio:
            item.add_marker(pytest.mark.skip(reason="needs fio on PATH (make test installs it)"))


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
