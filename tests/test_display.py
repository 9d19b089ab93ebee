"""One display for a parameter's values: figures, the report's tables and compare's tables read alike."""

from __future__ import annotations

import pandas as pd
import pytest
from test_compare import tidy
from test_plots import frame

import iobench
from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.report.compare_page import comparison_rows
from iobench.report.page import summary_table
from iobench.results.points import summarize


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        ("bs", 4096, "4k"),
        ("bs", 4096.0, "4k"),
        ("bs", 1 << 20, "1m"),
        ("bs", 1000, "1000"),
        ("bs", "4096,65536", "4k,64k"),
        ("bs", "4096-16384", "4k-16k"),
        ("bs", "4096", "4k"),
        ("size", 1 << 30, "1g"),
        ("iodepth", 4096, "4096"),
        ("iodepth", 4.0, "4"),
        ("direct", 1, "O_DIRECT"),
        ("direct", 0, "buffered"),
        ("readahead_kb", 128, "128 KiB"),
        ("readahead_kb", 4096, "4 MiB"),
        ("source", "/a/b/fio.json", "fio.json"),
        ("binding", "local", "local"),
        ("bs", pd.NA, "n/a"),
        ("bs", None, "n/a"),
    ],
)
def test_a_value_reads_as_a_person_knows_it(column: str, value: object, text: str) -> None:
    assert format_value(column, value) == text


def test_missing_reads_as_the_caller_asks() -> None:
    assert format_value("bs", float("nan"), missing="–") == "–"


def test_block_sizes_read_the_same_in_a_figure_and_the_report_table() -> None:
    df = frame(iodepth=[1, 4], bs=[4096, 65536])
    ax = iobench.plots.plot(df, x="bs", hue="iodepth").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4k", "64k"]
    table = summary_table(summarize(df))
    column = table["header"].index("bs")
    assert [row["labels"][column] for row in table["rows"]] == ["4k", "64k", "4k", "64k"]


def test_block_sizes_read_as_in_figures_in_the_compare_table() -> None:
    points = [({"bs": bs}, {"iops": [100.0, 101.0, 99.0]}) for bs in (4096, 1 << 20)]
    rows = comparison_rows(iobench.compare(tidy(points, "A"), tidy(points, "B"), metrics=["iops"]))
    assert rows.keys == ["bs"] and [r.labels for r in rows.rows] == [["4k"], ["1m"]]
    one_sided = [*points, ({"bs": 8192}, {"iops": [1.0, 2.0]})]
    only = comparison_rows(iobench.compare(tidy(points, "A"), tidy(one_sided, "B"), metrics=["iops"]))
    assert only.only_b == ["bs=8k"]


def test_compare_names_block_sizes_as_figures_do_when_nothing_matches() -> None:
    a = tidy([({"bs": 4096}, {"iops": [1.0, 2.0]})], "A")
    b = tidy([({"bs": 8192}, {"iops": [1.0, 2.0]})], "B")
    with pytest.raises(ResultsError, match="A has bs=4k, B has bs=8k"):
        iobench.compare(a, b)
