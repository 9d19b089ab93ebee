"""What a target path takes from the environment: ``${IOBENCH_…}`` here, nothing on a host.

The expanded path is what the job files and run files record, so a matrix
that could name any variable would copy this machine's environment (a token)
into them, or send it to a host.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.matrix.targets import VariableError, expand_path

MATRIX = """
version: 1
name: envtest
targets:
  - path: {path}
    size: 1M
fio: {{ioengine: null, rw: randread, bs: 4k, runtime: 1, time_based: 1}}
"""


@pytest.mark.fio
def test_a_variable_named_for_iobench_expands_and_runs_record_the_expanded_path(
    write_matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("IOBENCH_ENVTEST_DIR", str(data))
    matrix = write_matrix(MATRIX.format(path="${IOBENCH_ENVTEST_DIR}/t.dat"))
    result = CliRunner().invoke(app, ["run", str(matrix), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "r").iterdir()
    recorded = [
        p for p in run.rglob("*") if p.is_file() and str(data / "t.dat") in p.read_text(errors="replace")
    ]
    assert {p.name for p in recorded} >= {"manifest.json", "meta.json"}
    # The variable's name stays only in the copy of the matrix as written.
    named = [
        p.name
        for p in run.rglob("*")
        if p.is_file() and "IOBENCH_ENVTEST_DIR" in p.read_text(errors="replace")
    ]
    assert named == ["matrix.yaml"]


@pytest.mark.parametrize("name", ["HOME", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "iobench_lower"])
def test_any_other_variable_is_refused_naming_it_and_the_fix(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "s3cr3t")
    with pytest.raises(VariableError) as refused:
        expand_path(f"/srv/${{{name}}}/t.dat")
    message, fix = refused.value.args
    assert f"`${{{name}}}` is not expanded" in message and "s3cr3t" not in message
    assert f"${{IOBENCH_{name}}}" in fix


@pytest.mark.parametrize(
    "path", ["/srv/${IOBENCH_DIR}/t.dat", "/srv/${IOBENCH_DIR:-x}/t.dat", "/srv/${HOME}"]
)
def test_a_hosts_path_expands_nothing(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DIR", "s3cr3t")
    with pytest.raises(
        VariableError, match="in a host's target path is refused: it would send this machine's"
    ):
        expand_path(path, remote=True)
    assert expand_path("/srv/t.dat", remote=True) == "/srv/t.dat"


def test_a_default_applies_when_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOBENCH_UNSET", raising=False)
    assert expand_path("${IOBENCH_UNSET:-/var/tmp}/x") == "/var/tmp/x"
    monkeypatch.setenv("IOBENCH_UNSET", "")
    assert expand_path("${IOBENCH_UNSET:-/var/tmp}/x") == "/var/tmp/x"
    with pytest.raises(VariableError, match=r"environment variable \$\{IOBENCH_NOPE\} is not set"):
        expand_path("${IOBENCH_NOPE}/x")
