"""The web tests' server: the page's app served by uvicorn in a thread on a free port of
127.0.0.1 (`serving`), stopped after the test module; and the hostile trial's upload
(`pixel_bomb`)."""

import contextlib
import socket
import struct
import threading
import time
import zlib
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


def pixel_bomb(side: int = 13000) -> bytes:
    """A whole, valid greyscale PNG of ``side`` x ``side`` black pixels: the hostile
    trial's upload (13000 x 13000: 169 megapixels in 164 KB, just under PIL's own bomb
    limit), its rows compressed one at a time (never held whole)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    compressor, row = zlib.compressobj(9), bytes(side + 1)  # filter byte 0, then the row
    data = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )
