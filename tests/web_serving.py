"""The web tests' server: the page's app served by uvicorn in a thread on a free port of
127.0.0.1 (`serving`), stopped after the test module."""

import contextlib
import socket
import threading
import time
from typing import Iterator

import uvicorn

from dbaf_jax.web import runs, server
from dbaf_jax.web.store import JobStore


@contextlib.contextmanager
def serving(runs_with: runs.Serving | None, store: JobStore, stop_seconds: float) -> Iterator[int]:
    """Serves `server.build_app(runs_with, store)` until the block ends (then waits at most
    ``stop_seconds`` for the server to stop); yields its port. Afterwards the store's
    private folder must be gone."""
    sock = socket.create_server(("127.0.0.1", 0))
    instance = uvicorn.Server(
        uvicorn.Config(server.build_app(runs_with, store), log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not instance.started:
        time.sleep(0.05)
    yield sock.getsockname()[1]
    instance.should_exit = True
    thread.join(stop_seconds)
    assert not store.root.exists(), "the server stopped and left its private folder"
