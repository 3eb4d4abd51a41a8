"""Host work beside device work: decode ahead, encode behind, both bounded.

The user commands' loop is: decode inputs (host), run the model (device), fetch and
encode outputs (host). Run one after another, the device idles while PNGs are decoded
and encoded. `read_ahead` decodes the next inputs on worker threads while the current
batch computes; `Writer` fetches and encodes finished outputs on worker threads while
the next batch is dispatched. Both keep a bounded number of items in flight, so memory
stays flat on folders of any size. PIL's codecs and NumPy release the GIL, so threads
suffice. A sequential source (a clip's decoder) runs ahead on a thread of its own
(`in_background`), and a sequential sink (its encoder) behind on one worker (`Writer`
with ``workers=1``, which keeps the order).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import queue
import threading
from typing import Callable, Deque, Iterable, Iterator, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

DEFAULT_WORKERS = min(8, os.cpu_count() or 1)


def read_ahead(
    items: Iterable[Item],
    read: Callable[[Item], Result],
    depth: int,
    workers: int = DEFAULT_WORKERS,
    cost: Callable[[Item], int] | None = None,
    budget: int | None = None,
) -> Iterator[tuple[Item, Result | ValueError]]:
    """Yields ``(item, read(item))`` in the order of ``items``, with up to ``depth`` reads
    running ahead on ``workers`` threads, and with ``cost`` (what an item's result
    holds, e.g. a photo's decoded bytes from its header) only as many as ``budget``
    holds (one at least: a read costlier than the budget runs alone, not ahead). A read
    that raises ValueError (an unreadable input) yields the error in place of its
    result; other errors propagate."""
    pending: Deque[tuple[Item, concurrent.futures.Future, int]] = collections.deque()
    held = 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for item in items:
            weight = cost(item) if cost is not None else 0
            while pending and (
                len(pending) >= depth or (budget is not None and held + weight > budget)
            ):
                done, future, done_weight = pending.popleft()
                held -= done_weight
                yield _settled(done, future)
            pending.append((item, pool.submit(read, item), weight))
            held += weight
        while pending:
            done, future, _ = pending.popleft()
            yield _settled(done, future)


def _settled(item, future: concurrent.futures.Future):
    try:
        return item, future.result()
    except ValueError as err:
        return item, err


class Writer:
    """Runs output jobs on worker threads, at most ``max_pending`` at a time, and with
    ``budget`` only as many as it holds of their ``cost`` (`submit`; one at least).

    ``submit(job)`` blocks while ``max_pending`` jobs are unfinished; the first job
    that raised re-raises its error on the caller's thread at the next ``submit`` or at
    ``close``, so a failed write stops the run instead of passing unnoticed. Use as a
    context manager: leaving it waits for every job.
    """

    def __init__(self, max_pending: int, workers: int = DEFAULT_WORKERS, budget: int | None = None):
        self._pool = concurrent.futures.ThreadPoolExecutor(workers)
        self._pending: Deque[tuple[concurrent.futures.Future, int]] = collections.deque()
        self._max_pending = max_pending
        self._budget = budget
        self._held = 0

    def submit(self, job: Callable[[], object], cost: int = 0) -> None:
        """Runs ``job`` once fewer than ``max_pending`` jobs are unfinished and, with a
        budget, the unfinished ones' costs and ``cost`` fit in it (or none is unfinished)."""
        while self._pending and (
            len(self._pending) >= self._max_pending
            or (self._budget is not None and self._held + cost > self._budget)
        ):
            future, done_cost = self._pending.popleft()
            self._held -= done_cost
            future.result()
        self._pending.append((self._pool.submit(job), cost))
        self._held += cost

    def close(self) -> None:
        try:
            while self._pending:
                self._pending.popleft()[0].result()
        finally:
            for future, _ in self._pending:
                future.cancel()
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
            return
        # The run already failed: drop what has not started, let running jobs finish.
        for future, _ in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)


_NOTHING = object()


def one_behind(produced: Iterable[Item]) -> Iterator[Item]:
    """Yields each item of ``produced`` only once the next one has been produced.

    With a generator that dispatches device work as it advances, the host handles batch
    n (fetching, encoding) while the device already computes batch n+1.
    """
    previous = _NOTHING
    for item in produced:
        if previous is not _NOTHING:
            yield previous
        previous = item
    if previous is not _NOTHING:
        yield previous


_DONE = object()


def in_background(items: Iterable[Item], depth: int) -> Iterator[Item]:
    """Yields ``items`` in order while a thread produces up to ``depth`` of them ahead (a
    decoder: its next frames are decoded while the caller works on this one). An error
    of the producer is raised here, at the item it failed to produce; closing this
    generator early stops the producer."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(items)
        try:
            for item in iterator:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as err:  # handed to the consumer's thread
            put((_DONE, err))
        finally:
            getattr(
                iterator, "close", lambda: None
            )()  # a generator's files are closed on this thread

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """``items`` in lists of ``size`` (the last may be shorter), as they come."""
    chunk: list[Item] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
