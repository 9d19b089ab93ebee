"""parse_fio over many files in several processes gives the same frame as in one, and never forks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import parse, parse_fio

FIXTURES = sorted((Path(__file__).parent / "data" / "fio" / "fio-3.33").glob("*.json"))


@pytest.fixture
def even_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """No head start for this process: every process reads as many files (a short list still reaches the workers)."""
    monkeypatch.setattr(parse, "HEAD_START_FILES", 0)


@pytest.mark.usefixtures("even_shares")
@pytest.mark.parametrize("processes", [2, 3])
def test_parallel_parse_equals_serial_and_keeps_order(processes: int) -> None:
    paths = FIXTURES * 3
    serial = parse_fio(paths, processes=1)
    parallel = parse_fio(paths, processes=processes)
    pd.testing.assert_frame_equal(parallel, serial, check_exact=True)
    assert list(dict.fromkeys(parallel["source"])) == list(dict.fromkeys(str(p) for p in paths))


@pytest.mark.usefixtures("even_shares")
def test_an_error_in_a_worker_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "notfio.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ResultsError, match="notfio.json: no fio results"):
        parse_fio([*FIXTURES, bad], processes=2)


@pytest.mark.usefixtures("even_shares")
def test_the_first_bad_file_is_the_one_reported(tmp_path: Path) -> None:
    """As one process reading in order would: an error in this process's share wins over a worker's."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    for bad in (first, second):
        bad.write_text("no fio here")
    with pytest.raises(ResultsError, match="first.json"):
        parse_fio([first, *FIXTURES, second], processes=2)


@pytest.mark.usefixtures("even_shares")
@pytest.mark.parametrize("answer", [(-9, b""), (0, b"a site hook's greeting\n")], ids=["killed", "garbled"])
def test_a_worker_that_fails_to_answer_loses_nothing(
    answer: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parse, "run_filter", lambda argv, data, env=None: answer)
    paths = FIXTURES * 2
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), parse_fio(paths, processes=1))


def test_parsing_never_forks_a_process_with_a_live_thread() -> None:
    """A notebook's kernel has threads: parse_fio reads in worker processes without forking it."""
    probe = textwrap.dedent(
        f"""
        import os, sys, threading
        forks = []
        os.register_at_fork(before=lambda: forks.append(threading.active_count()))
        import multiprocessing
        multiprocessing.set_start_method("fork", force=True)  # were a pool used, it would fork
        from iobench.results.fioout import parse
        parse.HEAD_START_FILES = 0
        asked = []
        real = parse.run_filter
        parse.run_filter = lambda *a, **k: asked.append(a[0]) or real(*a, **k)
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        paths = {[str(p) for p in FIXTURES]!r} * 4
        frame = parse.parse_fio(paths, processes=2)
        stop.set()
        assert frame.equals(parse.parse_fio(paths, processes=1)), "not the frame of one process"
        print(len(asked), len(forks))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    workers, forks = map(int, done.stdout.split())
    assert workers == 1 and forks == 0
