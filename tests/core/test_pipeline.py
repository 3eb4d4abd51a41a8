"""Read-ahead and write-behind: order kept, errors where they belong, bounded work in flight."""

import threading
import time

import pytest

from dbaf_jax.core import pipeline


def test_read_ahead_keeps_order_and_returns_read_errors():
    def read(i):
        if i == 3:
            raise ValueError("item 3 is unreadable")
        time.sleep(0.001 * (10 - i))  # later items finish first
        return i * i

    results = list(pipeline.read_ahead(range(10), read, depth=4, workers=4))
    assert [item for item, _ in results] == list(range(10))
    assert [r for i, r in results if i != 3] == [i * i for i in range(10) if i != 3]
    assert isinstance(results[3][1], ValueError) and "item 3" in str(results[3][1])


def test_read_ahead_lets_other_errors_through():
    def read(i):
        raise KeyError(i)

    with pytest.raises(KeyError):
        list(pipeline.read_ahead(range(3), read, depth=2))


def test_read_ahead_reads_at_most_depth_ahead():
    started = []
    lock = threading.Lock()

    def read(i):
        with lock:
            started.append(i)
        return i

    for item, _ in pipeline.read_ahead(range(20), read, depth=3, workers=2):
        time.sleep(0.002)
        with lock:
            assert max(started) <= item + 3


def test_read_ahead_holds_at_most_its_budget_of_costs():
    """Items of cost 1 run 3 ahead (the depth); with a budget of 5, an item of cost 4
    waits until those ahead of it are taken, and one of cost 9 (over the budget) runs
    alone: nothing is read ahead of it, nor it ahead of anything."""
    costs = [1, 1, 1, 1, 4, 1, 9, 1, 1]
    reading, peak = set(), [0]
    lock = threading.Lock()

    def read(i):
        with lock:
            reading.add(i)
            peak[0] = max(peak[0], sum(costs[j] for j in reading))
        return i

    order = []
    for item, result in pipeline.read_ahead(
        range(len(costs)), read, depth=3, workers=4, cost=costs.__getitem__, budget=5
    ):
        with lock:
            order.append(result)
            ahead = [j for j in reading if j > item]
            assert sum(costs[j] for j in ahead) <= 5, (item, ahead)
            assert costs[item] <= 5 or not ahead, (item, ahead)
            reading.discard(item)
    assert order == list(range(len(costs))) and peak[0] <= 9


def test_writer_holds_at_most_its_budget_of_costs():
    running, peak = [0], [0]
    lock = threading.Lock()

    def job(cost):
        with lock:
            running[0] += cost
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= cost

    costs = [2, 2, 2, 5, 1, 1, 8, 1]
    with pipeline.Writer(max_pending=4, workers=8, budget=5) as writer:
        for cost in costs:
            writer.submit(lambda cost=cost: job(cost), cost)
    assert peak[0] <= 8  # the 8 alone; otherwise at most 5 at a time


def test_writer_runs_every_job_and_bounds_pending():
    done, running, peak = [], [0], [0]
    lock = threading.Lock()

    def job(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1
            done.append(i)

    with pipeline.Writer(max_pending=3, workers=8) as writer:
        for i in range(30):
            writer.submit(lambda i=i: job(i))
    assert sorted(done) == list(range(30)) and peak[0] <= 3


def test_writer_raises_a_failed_job_on_the_callers_thread():
    def fail():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        with pipeline.Writer(max_pending=2) as writer:
            writer.submit(fail)
            for _ in range(5):
                writer.submit(lambda: None)


def counted(count, produced):
    """0, 1, ... ``count - 1``, each appended to ``produced`` as it is made."""
    for i in range(count):
        produced.append(i)
        yield i


def test_one_behind_yields_after_the_next_is_produced():
    produced = []
    seen = [(item, list(produced)) for item in pipeline.one_behind(counted(4, produced))]
    assert [item for item, _ in seen] == [0, 1, 2, 3]
    assert [p for _, p in seen] == [[0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert list(pipeline.one_behind([])) == []


def test_in_background_keeps_order_and_runs_at_most_depth_ahead():
    produced = []
    seen = []
    for item in pipeline.in_background(counted(20, produced), depth=3):
        time.sleep(0.01)
        assert len(produced) <= item + 1 + 3 + 1  # the queue's depth, and one being put
        seen.append(item)
    assert seen == list(range(20))


def test_in_background_raises_the_producers_error_at_its_place():
    def items():
        yield 1
        yield 2
        raise ValueError("frame 2 is damaged")

    got = []
    with pytest.raises(ValueError, match="frame 2 is damaged"):
        for item in pipeline.in_background(items(), depth=4):
            got.append(item)
    assert got == [1, 2]


def test_in_background_closed_early_stops_and_closes_the_producer():
    closed = threading.Event()

    def items():
        try:
            for i in range(10**6):
                yield i
        finally:
            closed.set()

    before = threading.active_count()
    background = pipeline.in_background(items(), depth=2)
    assert next(background) == 0
    background.close()
    assert closed.is_set() and threading.active_count() == before


def test_chunks_keep_order_and_the_short_last_one():
    assert list(pipeline.chunks(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(pipeline.chunks([], 3)) == []
