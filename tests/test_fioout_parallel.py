"""parse_fio over many files in several processes gives the same frame as in one, and never forks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import parse, parse_fio
from iobench.system.process import Helper

FIXTURES = sorted((Path(__file__).parent / "data" / "fio" / "fio-3.33").glob("*.json"))


@pytest.fixture
def even_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """No head start for this process: every process reads as many files (a short list still reaches the workers)."""
    monkeypatch.setattr(parse, "HEAD_START_FILES", 0)
    monkeypatch.setattr(parse, "START_FILES", 0)


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
@pytest.mark.parametrize("answer", [None, b"a site hook's greeting\n"], ids=["killed", "garbled"])
def test_a_worker_that_fails_to_answer_loses_nothing(
    answer: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Helper, "ask", lambda self, request: answer)
    paths = FIXTURES * 2
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), parse_fio(paths, processes=1))


@pytest.mark.usefixtures("even_shares")
def test_a_worker_is_kept_for_the_next_parse_and_replaced_when_killed() -> None:
    paths = FIXTURES * 2
    serial = parse_fio(paths, processes=1)
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), serial)
    first = parse._helper(0).pid
    assert first is not None
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), serial)
    assert parse._helper(0).pid == first  # the same worker answered again
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), serial)  # its share read here
    pd.testing.assert_frame_equal(parse_fio(paths, processes=2), serial)
    assert parse._helper(0).pid not in (None, first)  # a new worker


def test_a_worker_ends_with_the_process_that_started_it() -> None:
    probe = textwrap.dedent(
        f"""
        import os, signal, sys
        from iobench.results.fioout import parse
        parse.HEAD_START_FILES = parse.START_FILES = 0
        parse.parse_fio({[str(p) for p in FIXTURES]!r} * 2, processes=2)
        print(parse._helper(0).pid, flush=True)
        if sys.argv[1] == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    for how in ("exits", "killed"):
        done = subprocess.run(
            [sys.executable, "-c", probe, how], capture_output=True, text=True, timeout=300, check=False
        )
        worker = int(done.stdout.split()[0])
        deadline = time.monotonic() + 10
        while Path(f"/proc/{worker}").exists() and "Z" not in _state(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{worker}").exists() or "Z" in _state(worker), how


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


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
        parse.HEAD_START_FILES = parse.START_FILES = 0
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        paths = {[str(p) for p in FIXTURES]!r} * 4
        frame = parse.parse_fio(paths, processes=2)
        stop.set()
        assert frame.equals(parse.parse_fio(paths, processes=1)), "not the frame of one process"
        print(sum(h.pid is not None for h in parse._HELPERS), len(forks))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    workers, forks = map(int, done.stdout.split())
    assert workers == 1 and forks == 0
