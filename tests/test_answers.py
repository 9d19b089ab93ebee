"""Answers remembered per program file (iobench.store.answers): the fio version, numactl's."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from iobench.store.answers import answer_path, recall, remember
from iobench.system import metadata


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "iobench"


def _program(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_an_answer_is_kept_until_the_file_changes(tmp_path: Path, cache: Path) -> None:
    tool = _program(tmp_path / "tool", "echo 1\n")
    assert recall(str(tool), "tool-version") is None
    remember(str(tool), "tool-version", "1.0")
    assert recall(str(tool), "tool-version") == "1.0"
    assert recall(str(tool), "other-kind") is None
    first = answer_path(str(tool), "tool-version")
    _program(tool, "echo 2 # a different size\n")  # upgraded in place
    assert answer_path(str(tool), "tool-version") != first
    assert recall(str(tool), "tool-version") is None
    tool.unlink()
    assert answer_path(str(tool), "tool-version") is None and recall(str(tool), "tool-version") is None


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    tool = _program(tmp_path / "tool", "echo 1\n")
    remember(str(tool), "tool-version", "1.0")
    assert recall(str(tool), "tool-version") is None


def test_numactl_is_asked_once_per_binary(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    _program(tmp_path / "numactl", f"echo numactl >> {calls}\necho policy: default\n")
    _program(tmp_path / "dpkg-query", f"echo dpkg >> {calls}\nprintf 9.9-1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert metadata._numactl_version() == "9.9-1"
    assert metadata._numactl_version() == "9.9-1"
    assert calls.read_text().split() == ["numactl", "dpkg"]


def test_a_failing_numactl_is_not_remembered(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    numactl = _program(tmp_path / "numactl", "exit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert metadata._numactl_version() is None
    assert recall(str(numactl), "numactl-version") is None


def test_an_answer_another_user_could_have_planted_is_not_believed(tmp_path: Path, cache: Path) -> None:
    """An answer decides what is checked (fio's acceptance of a job file): only this user's own counts."""
    tool = _program(tmp_path / "tool", "echo 1\n")
    remember(str(tool), "tool-version", "1.0")
    path = answer_path(str(tool), "tool-version")
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    assert recall(str(tool), "tool-version") == "1.0"
    path.chmod(0o666)  # anyone could have written it
    assert recall(str(tool), "tool-version") is None
    path.chmod(0o600)
    path.parent.chmod(0o777)  # anyone could have put it there
    assert recall(str(tool), "tool-version") is None
    path.parent.chmod(0o700)
    os.chown(path, 65534, 65534)  # another user's file
    assert recall(str(tool), "tool-version") is None
