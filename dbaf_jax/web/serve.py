"""Serve the anonymize-and-recover page on this machine.

    python -m dbaf_jax.web --model DIR [--port N]

Open the address it prints in a browser. It listens on 127.0.0.1 only: other
machines cannot reach it. ``--host ADDRESS --allow-remote`` listens elsewhere (the
page then serves anyone who can reach that address; it prints a warning). Uploads and
results stay in a private temporary folder, deleted when the results are downloaded,
after --keep-minutes of no use, and when the server stops (Ctrl-C). The model and
photo options are those of ``python -m dbaf_jax.commands.anonymize``. See docs/web.md.
"""

from __future__ import annotations

import argparse
import atexit
import ipaddress
import socket
import sys
from typing import Sequence

import uvicorn

from dbaf_jax import commands
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.faces.photos import MIN_FACE_SIZE
from dbaf_jax.inference.run import Model
from dbaf_jax.web import runs, server
from dbaf_jax.web.jobs import Limits
from dbaf_jax.web.store import JobStore

DEFAULT_PORT = 8765
GRACE = 10  # seconds
MB = 1 << 20


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.web",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help=commands.MODEL_HELP)
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (0: any free one); default {DEFAULT_PORT}",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; default 127.0.0.1 (this machine only)",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --host to be an address other machines can reach",
    )
    commands.detector_arguments(
        parser,
        "face detectors, separated by commas, as anonymize --detectors takes them; "
        "default every installed default one (docs/photos.md)",
    )
    parser.add_argument(
        "--parser",
        help="BiSeNet directory (parser_bisenet) for soft face masks; default a box mask",
    )
    parser.add_argument(
        "--min-face-size",
        type=float,
        default=MIN_FACE_SIZE,
        help="leave faces whose crop side is under N pixels as they were (reported); default 0: every face",
    )
    commands.compute_arguments(
        parser,
        "faces per model call; default 32 per GPU/TPU, 8 on a CPU",
        "compute dtype of every network",
    )
    commands.flags(
        parser,
        {
            "--allow-unchecked-model": "run a model directory without model.json",
            "--untrained-mode": "recover photos and clips in a mode the model was not trained for (its results are not the original faces)",
            "--allow-anonymized-input": "anonymize photos and clips that are already outputs of anonymize (their copies lose the recovery record)",
        },
    )
    _bound_arguments(parser.add_argument_group("bounds"))
    return parser


def _bound_arguments(bounds: argparse._ArgumentGroup) -> None:
    """The bounds on what the server holds (`Limits`), in MiB and minutes."""
    bounds.add_argument(
        "--max-file-mb",
        type=float,
        default=Limits.file_bytes / MB,
        help="largest file taken, in MiB",
    )
    bounds.add_argument(
        "--max-run-mb",
        type=float,
        default=Limits.job_bytes / MB,
        help="most bytes one run holds, in MiB",
    )
    bounds.add_argument(
        "--max-files",
        type=commands.positive_int,
        default=Limits.files,
        help="most files in one run",
    )
    bounds.add_argument(
        "--max-runs", type=commands.positive_int, default=Limits.jobs, help="most runs held at once"
    )
    bounds.add_argument(
        "--max-pixels",
        type=commands.positive_int,
        default=Limits.pixels,
        help=f"refuse photos of more than N pixels on upload, by their header, before storing them; default {Limits.pixels:,}"
        " (a 108-megapixel phone photo passes; the command line's default is higher: docs/web.md)",
    )
    bounds.add_argument(
        "--keep-minutes",
        type=float,
        default=Limits.keep_seconds / 60,
        help="delete a run's files after this many minutes without use",
    )
    bounds.add_argument(
        "--temp-dir", help="where the private folder is made; default the system's temporary folder"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    local = is_loopback(args.host)
    if not local and not args.allow_remote:
        parser().error(
            f"--host {args.host} is reachable from other machines: add --allow-remote to serve it there"
        )
    if min(args.max_file_mb, args.max_run_mb, args.keep_minutes) <= 0:
        parser().error("--max-file-mb, --max-run-mb and --keep-minutes must be positive")
    limits = Limits(
        int(args.max_file_mb * MB),
        int(args.max_run_mb * MB),
        args.max_files,
        args.max_runs,
        args.keep_minutes * 60,
        pixels=args.max_pixels,
    )
    print("loading the model ...", file=sys.stderr)
    serving = runs.Serving(
        Model.load(args.model, args.dtype, args.allow_unchecked_model, commands.face_finding(args)),
        commands.folder_run_settings(args),
        args.untrained_mode,
    )
    sock = listen(args.host, args.port)
    store = JobStore(limits, args.temp_dir)
    atexit.register(store.close)  # also when uvicorn does not get to run the app's shutdown
    app = server.build_app(serving, store, [*server.LOOPBACK_HOSTS, args.host] if local else ["*"])
    port = sock.getsockname()[1]
    if not local:
        print(
            f"warning: serving on {args.host}, which other machines can reach: anyone who reaches it can use the page "
            "and this machine's model (their files are kept apart, but nothing checks who they are)",
            file=sys.stderr,
        )
    print(
        f"serving on http://{'127.0.0.1' if args.host == 'localhost' else args.host}:{port}/ "
        "(Ctrl-C stops it and deletes every upload and result)",
        file=sys.stderr,
        flush=True,
    )
    try:
        # A page left open keeps a connection: shutdown waits for it at most GRACE seconds, then deletes everything.
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACE,
        )
        uvicorn.Server(config).run(sockets=[sock])
    except (
        KeyboardInterrupt
    ):  # uvicorn shut the app down (its files deleted), then passes Ctrl-C on
        pass
    print("stopped; every upload and result was deleted", file=sys.stderr)
