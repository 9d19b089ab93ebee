"""The matrix file: one broken asset per error, every error at once, and expansion."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.errors import MatrixError
from iobench.matrix.model import load_matrix, parse_matrix, point_writes

pytestmark = pytest.mark.fio
ASSETS = Path(__file__).parent / "data" / "matrices"
BAD = sorted(ASSETS.glob("bad-*.yaml"))


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <regex>'"
    return first.removeprefix("# expect: ")


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_each_broken_matrix_is_refused_with_its_message(path: Path) -> None:
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert re.search(expected(path), message), message
    assert path.name in message


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_each_broken_matrix_exits_2_from_the_cli_without_a_traceback(path: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert re.search(expected(path), result.output.replace("\n  ", " ")), result.output
    assert not (tmp_path / "results").exists()


def test_every_error_is_reported_at_once() -> None:
    with pytest.raises(MatrixError) as caught:
        load_matrix(ASSETS / "bad-many-errors.yaml")
    issues = caught.value.issues
    assert len(issues) == 4
    assert [re.search(r":(\d+):\d+:", i).group(1) for i in issues] == ["6", "7", "9", "10"]  # type: ignore[union-attr]


def test_minimal_matrix_loads_with_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IOBENCH_TEST_DIR", str(tmp_path))
    m = load_matrix(ASSETS / "ok-minimal.yaml")
    assert m.targets[0].path == str(tmp_path / "ok-minimal.dat")
    assert m.targets[0].size == 4 * 2**20
    assert m.combos == ({},)
    assert (m.repeat, m.order, m.launch) == (1, "interleaved", "single")
    assert m.fio == {"ioengine": "null", "rw": "randread", "bs": 4096}
    assert m.fio_version.startswith("fio-3")


def test_var_default_applies_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOBENCH_TEST_DIR", raising=False)
    m = load_matrix(ASSETS / "ok-minimal.yaml")
    assert m.targets[0].path == "/tmp/ok-minimal.dat"


BASE = """
version: 1
name: t
targets: [{path: /tmp/iobench-t.dat, size: 1M}]
fio: {ioengine: null, rw: randread}
"""


def matrix(text: str, **kwargs: Any) -> Any:
    return parse_matrix(BASE + text, "t.yaml", **kwargs)


def test_axes_expand_in_order_with_typed_values() -> None:
    m = matrix("matrix:\n  bs: [4k, 64k]\n  iodepth: [1, 8]\n  direct: [true, false]\n")
    assert [c["bs"] for c in m.combos] == [4096] * 4 + [65536] * 4
    assert [c["iodepth"] for c in m.combos] == [1, 1, 8, 8] * 2
    assert m.values[0] == {"bs": 4096, "iodepth": 1, "direct": 1}
    assert m.values[-1] == {"bs": 65536, "iodepth": 8, "direct": 0}


def test_alias_axis_becomes_canonical_name() -> None:
    m = matrix("matrix:\n  blocksize: [4k]\n")
    assert list(m.axes) == ["bs"]


def test_include_and_exclude_follow_github_semantics() -> None:
    m = matrix(
        "matrix:\n  iodepth: [1, 8]\n  numjobs: [1, 4]\n"
        "  exclude: [{iodepth: 8, numjobs: 4}]\n"
        "  include: [{numjobs: 4, rwmixread: 70}, {iodepth: 32, numjobs: 1}]\n"
    )
    assert m.combos == (
        {"iodepth": 1, "numjobs": 1},
        {"iodepth": 1, "numjobs": 4, "rwmixread": 70},
        {"iodepth": 8, "numjobs": 1},
        {"iodepth": 32, "numjobs": 1},
    )


def test_engine_options_are_known_with_their_engine() -> None:
    text = (
        BASE.replace("fio: {ioengine: null, ", "fio: {")
        + "matrix:\n  ioengine: [io_uring]\n  hipri: [0, 1]\n"
    )
    m = parse_matrix(text, "t.yaml")
    assert [c["hipri"] for c in m.combos] == [0, 1]
    with pytest.raises(MatrixError, match="unknown fio option `hipri`"):
        matrix("matrix:\n  hipri: [1]\n")


def test_cli_targets_replace_file_targets_and_never_inherit_allow_write() -> None:
    text = BASE.replace("size: 1M}", "size: 1M, allow_write: true}")
    m = parse_matrix(text, "t.yaml", targets=("/dev/sdz",))
    assert [(t.path, t.size, t.allow_write) for t in m.targets] == [("/dev/sdz", 2**20, False)]
    m = parse_matrix(text, "t.yaml", targets=("/dev/sdz",), allow_write=("/dev/sdz",))
    assert m.targets[0].allow_write


def test_no_targets_is_an_error_with_the_fix() -> None:
    with pytest.raises(MatrixError, match="no targets.*--target"):
        parse_matrix("version: 1\nname: t\n", "t.yaml")


def test_writes_detected_from_axes_and_fio() -> None:
    text = (
        BASE.replace("rw: randread}", "direct: 0}") + "matrix:\n  rw: [randread, randwrite, randrw, trim]\n"
    )
    m = parse_matrix(text, "t.yaml")
    assert [point_writes(m, c) for c in m.combos] == [False, True, True, True]


def test_section_names_are_unique_and_safe() -> None:
    text = BASE.replace(
        "targets: [{path: /tmp/iobench-t.dat, size: 1M}]",
        "targets: [{path: '/tmp/a/x y.dat', size: 1M}, {path: /tmp/b/x y.dat, size: 1M}]",
    )
    m = parse_matrix(text, "t.yaml")
    assert [t.section for t in m.targets] == ["x_y.dat", "x_y.dat-2"]
