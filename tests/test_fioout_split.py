"""split.run_blocks: blocks shared out to forked processes come back complete and in order."""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import psutil
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import split

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forks (parse_fio forks on Linux only)")


def no_children_left() -> bool:
    return not psutil.Process().children(recursive=True)


def test_results_come_back_in_block_order_from_every_process() -> None:
    def work(block: int) -> tuple[int, int]:
        if block == 0:
            os.sched_yield()  # nothing else: which process runs what is up to the scheduler
        return block, os.getpid()

    results = split.run_blocks(200, work, 3, list)
    assert [block for block, _ in results] == list(range(200))
    assert no_children_left()


def test_finish_gets_the_results_and_its_answer_is_returned() -> None:
    assert split.run_blocks(5, lambda block: block * block, 2, sum) == 0 + 1 + 4 + 9 + 16
    assert split.run_blocks(0, lambda block: block, 2, list) == []


def test_the_lowest_failing_block_is_raised_wherever_it_ran() -> None:
    def work(block: int) -> int:
        if block in (7, 40):
            raise ValueError(f"block {block}")
        return block

    for _ in range(3):  # whichever process takes block 7, its error is the one raised
        with pytest.raises(ValueError, match="^block 7$"):
            split.run_blocks(60, work, 2, list)
    assert no_children_left()


def test_blocks_of_a_child_that_dies_are_run_here() -> None:
    here = os.getpid()

    def work(block: int) -> int:
        if os.getpid() != here:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return block

    assert split.run_blocks(50, work, 2, list) == list(range(50))
    assert no_children_left()


def test_an_exception_here_stops_and_reaps_the_children() -> None:
    here = os.getpid()

    def work(block: int) -> int:
        if os.getpid() == here:
            raise KeyboardInterrupt
        time.sleep(60)  # a child holds its first block: this process surely gets one (and is not waited on)
        return block

    with pytest.raises(KeyboardInterrupt):
        split.run_blocks(50, work, 2, list)
    assert no_children_left()


def test_an_error_that_does_not_pickle_is_described() -> None:
    here = os.getpid()
    failed, fail = os.pipe()

    class Local(Exception):  # a local class does not pickle
        pass

    def work(block: int) -> int:
        if os.getpid() != here:
            os.write(fail, b"x")
            raise Local("child trouble")
        if block == 0:  # hold block 0 until the child has failed on block 1
            assert select.select([failed], [], [], 30)[0]
        return block

    try:
        with pytest.raises(ResultsError, match="a parsing process failed: Local: child trouble"):
            split.run_blocks(50, work, 2, list)
    finally:
        os.close(failed)
        os.close(fail)
    assert no_children_left()


def test_too_many_blocks_is_refused() -> None:
    with pytest.raises(ValueError, match="count must be"):
        split.run_blocks(split.MAX_BLOCKS + 1, lambda block: block, 2, list)
