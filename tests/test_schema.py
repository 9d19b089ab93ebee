"""One schema: every frame column declared once, and everything that lists columns checked against it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import iobench
from iobench.results import points, schema
from iobench.results.fioout.rows import FRAME_COLUMNS, FRAME_DTYPES
from iobench.results.loading import RunWarning

ROOT = Path(__file__).resolve().parent.parent


def test_every_column_is_declared_once_with_a_known_dtype_group_and_meaning() -> None:
    names = [c.name for c in schema.COLUMNS]
    assert len(names) == len(set(names))
    for column in schema.COLUMNS:
        assert column.dtype in ("Int64", "Float64", "string", "boolean"), column
        assert column.group in schema.GROUPS, column
        assert column.meaning and "\n" not in column.meaning, column


def test_fios_row_columns_are_the_schemas() -> None:
    """The rows fio's outputs give (results/fioout/rows.py) carry the schema's names and dtypes."""
    undeclared = [c for c in FRAME_COLUMNS if c != "source" and c not in schema.BY_NAME]
    assert undeclared == []
    wrong = {c: d for c, d in FRAME_DTYPES.items() if c != "source" and schema.dtype(c) != d}
    assert wrong == {}


def test_the_column_groups_come_from_the_schema() -> None:
    assert points.IDENTITY == schema.group("identity")
    assert points.PLACEMENT == schema.group("placement")
    assert points.TELEMETRY == schema.group("telemetry")
    assert set(points.ADDED) <= set(schema.group("totals"))
    assert points.TELEMETRY_TEXT == {c for c in points.TELEMETRY if schema.dtype(c) == "string"}


def test_a_declared_column_is_never_a_parameter() -> None:
    frame = pd.DataFrame({name: [] for name in [*schema.FRAME, "bs", "binding"]})
    assert points.parameter_columns(frame) == ["bs", "binding"]


def test_docs_table_is_the_schemas() -> None:
    text = (ROOT / "docs" / "frame.md").read_text()
    table = text.split("-->\n", 1)[1].split("\n<!-- end of schema table -->", 1)[0]
    assert table == schema.markdown_table(), (
        "docs/frame.md's table differs from the schema; paste iobench.results.schema.markdown_table() there"
    )


def test_the_readme_names_only_declared_columns_and_links_the_table() -> None:
    readme = (ROOT / "README.md").read_text()
    paragraph = readme.split("**The tidy frame**", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z_0-9]+)`", paragraph))
    assert named and named <= set(schema.BY_NAME)
    assert "docs/frame.md" in paragraph


def test_the_fingerprint_follows_every_name_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    before = schema.fingerprint()
    changed = tuple(
        schema.Column(c.name, "Float64", c.unit, c.group, c.meaning) if c.name == "ctx" else c
        for c in schema.COLUMNS
    )
    monkeypatch.setattr(schema, "COLUMNS", changed)
    assert schema.fingerprint() != before
    monkeypatch.setattr(schema, "COLUMNS", (*changed, schema.Column("window_s", "Float64", "s", "fio", "x")))
    assert len({before, schema.fingerprint()}) == 2


@pytest.mark.fio
def test_a_real_frame_is_in_the_schemas_order_and_dtypes(
    null_matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = iobench.run(iobench.load_matrix(null_matrix()), out=tmp_path / "r").run_dir
    frame = iobench.load(run)
    declared = [c for c in frame.columns if c in schema.BY_NAME]
    assert declared == [c for c in schema.FRAME if c in frame.columns]
    assert points.parameter_columns(frame) == ["iodepth", "numjobs"]
    assert list(frame.columns) == [*schema.group("identity"), "iodepth", "numjobs", *declared[8:]]
    assert {c: str(frame[c].dtype) for c in declared} == {c: schema.dtype(c) for c in declared}
    # A frame saved under another schema is a stale cache: rebuilt, with the reason.
    monkeypatch.setattr(schema, "FRAME_VERSION", schema.FRAME_VERSION + 1)
    with pytest.warns(RunWarning, match="written with another frame schema"):
        iobench.load(run)
