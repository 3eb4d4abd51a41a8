"""The web page's HTTP side: a Starlette app (`build_app`) served by uvicorn.

The page (static/) asks for a session secret, creates a job, streams each dropped file
in a request of its own (raw body, its name in the ``X-File-Name`` header, only ever
shown), starts the job with the password in a JSON body, polls the job's state, and
fetches results. Every API request carries the session secret in ``X-Session``: a
header, so a page of another site cannot send it without a CORS preflight, which this
server never grants. Every request that changes anything (POST, PUT, DELETE) must also
carry the page's own ``Origin`` (browsers send it), and no API request may come from
another site (``Origin``, ``Sec-Fetch-Site``): another site's page cannot make, start,
delete or crowd out sessions and runs (`SameOrigin`). Host headers other than the
listening address are refused (DNS rebinding). Responses are never cached
(``Cache-Control: no-store``). Jobs run one at a time on one worker thread, through
`runs.run_job`.

Each endpoint is a handler of this module, listed once in `ROUTES`; what a handler
serves (the job store, the model and settings, the worker) is the app's state
(``request.app.state``), which `build_app` sets.

A download keeps its run's files until it has been sent (`Download`), so a second
download of the same results (a double click) is never cut off by the first deleting
them; the zip of a run's results is built once and served to every request for it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import mimetypes
import threading
import urllib.parse
import zipfile
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dbaf_jax.core.errors import InputError
from dbaf_jax.storage import atomic_files, file_kinds, keys
from dbaf_jax.web import runs
from dbaf_jax.web.jobs import Job, LimitError, NotFound, Output, UnknownSession
from dbaf_jax.web.store import JobStore

STATIC = Path(__file__).resolve().parent / "static"
JSON_BYTES = 16 << 10  # a request's JSON body: an operation, or a password and its choices
MAX_PASSWORD = 1024  # characters
LOOPBACK_HOSTS = ["127.0.0.1", "localhost"]
DELETED_HEADER = "X-Run-Deleted"  # on the download after which the run's files are deleted: why
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' blob:; media-src 'self' blob:; object-src 'none'; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
]


class SameOrigin:
    """ASGI middleware refusing (403) API requests another site's page sent: those whose
    ``Origin`` is not this server's own or whose ``Sec-Fetch-Site`` says another site;
    and requests that change anything (not GET or HEAD) without an ``Origin``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        origin, site = headers.get("origin"), headers.get("sec-fetch-site")
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        changes = scope["method"] not in ("GET", "HEAD")
        why = (
            f"a request from another site ({origin}) is refused: only this server's page may use it"
            if origin is not None and origin != own
            else f"a request from another site (Sec-Fetch-Site: {site}) is refused"
            if site is not None and site not in ("same-origin", "none")
            else "a request that changes anything must come from this server's page (no Origin header)"
            if changes and origin is None
            else None
        )
        if why is None:
            return await self.app(scope, receive, send)
        await _error(why, 403)(scope, receive, send)


class Download(FileResponse):
    """A result sent as a file, its run's files kept until it has been sent
    (`JobStore.begin_download` before, `end_download` after, however it ends);
    ``sent()`` runs when the whole body has gone (the download counts then)."""

    def __init__(self, store: JobStore, job: Job, sent, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._store, self._job, self._sent = store, job, sent

    async def __call__(self, scope, receive, send):
        whole = False

        async def sending(message):
            nonlocal whole
            await send(message)
            kind = message["type"]
            if kind == "http.response.pathsend" or (
                kind == "http.response.body" and not message.get("more_body", False)
            ):
                whole = True

        try:
            await super().__call__(scope, receive, sending)
        finally:
            if whole:
                await run_in_threadpool(self._sent)
            await run_in_threadpool(self._store.end_download, self._job)


class SecurityHeaders:
    """ASGI middleware adding `SECURITY_HEADERS` to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json(request: Request) -> dict:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > JSON_BYTES:
            raise LimitError(f"a request's JSON body is at most {JSON_BYTES} bytes")
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        raise InputError("the request's body is not JSON") from None
    if not isinstance(value, dict):
        raise InputError("the request's body is not a JSON object")
    return value


def _declared_size(request: Request) -> int | None:
    """The larger of the body's length and the file size the page announces
    (``X-File-Size``: a file over the limit is announced without its bytes)."""
    sizes = [
        int(value)
        for value in (request.headers.get("content-length"), request.headers.get("x-file-size"))
        if value is not None and value.isdigit()
    ]
    return max(sizes, default=None)


# The endpoints: module-level handlers reading what the app serves from its state
# (`build_app`: ``store``, ``serving``, ``worker``, ``stopping``); `ROUTES` lists them.


def _store(request: Request) -> JobStore:
    return request.app.state.store


def _job_of(request: Request) -> Job:
    return _store(request).get(request.path_params["job"], request.headers.get("x-session", ""))


def _janitor(store: JobStore, stopping: threading.Event) -> None:
    """Expires idle jobs and sessions until ``stopping`` is set."""
    limits = store.limits
    while not stopping.wait(min(60.0, limits.keep_seconds / 4, limits.open_seconds / 4)):
        store.expire()


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette):
    state = app.state
    thread = threading.Thread(
        target=_janitor, args=(state.store, state.stopping), name="dbaf-web-janitor", daemon=True
    )
    thread.start()
    try:
        yield
    finally:  # the server stops: the running file finishes, nothing queued starts, everything is deleted
        state.stopping.set()
        state.worker.shutdown(wait=True, cancel_futures=True)
        state.store.close()


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html")


async def new_session(request: Request) -> Response:
    store = _store(request)
    client = request.client.host if request.client is not None else ""
    return JSONResponse(
        {
            "session": store.new_session(client),
            "limits": store.limits.as_dict(),
            "passwordMax": MAX_PASSWORD,
            "kinds": file_kinds.for_page(),
        }
    )


async def end_session(request: Request) -> Response:
    await run_in_threadpool(_store(request).end_session, request.headers.get("x-session", ""))
    return JSONResponse({"ok": True})


async def create_job(request: Request) -> Response:
    operation = (await _json(request)).get("operation")
    if operation not in ("anonymize", "recover"):
        raise InputError(f"operation must be anonymize or recover, not {operation!r}")
    job = _store(request).create(request.headers.get("x-session", ""), operation)
    return JSONResponse({"job": job.id})


async def _receive(request: Request, upload) -> None:
    """Streams the request's body into ``upload``, closed as taken or as refused (why):
    LimitError past a bound, or once the whole body has been read when its header was
    refused (`jobs.Upload.refusal`: nothing of it was stored)."""
    try:
        async for chunk in request.stream():
            upload.write(chunk)
    except LimitError as err:
        upload.close(False, str(err))
        raise
    except BaseException:
        upload.close(False, "the upload was interrupted")
        raise
    upload.close(True)
    if upload.refusal is not None:
        raise LimitError(upload.refusal)


async def add_file(request: Request) -> Response:
    job = _job_of(request)
    name = urllib.parse.unquote(request.headers.get("x-file-name", ""))
    entry = job.new_entry(name, _declared_size(request))
    await _receive(request, job.upload(entry))
    return JSONResponse(entry.as_dict())


async def add_key_part(request: Request) -> Response:
    job, part = _job_of(request), request.path_params["part"]
    if part not in ("key", "ledger"):
        return _error(f"no such key part {part!r}", 404)
    upload = job.key_upload(part)
    await _receive(request, upload)
    if part == "key":
        try:
            keys.read_key_file(upload.path)
        except InputError as err:
            upload.path.unlink()
            job.key_file = None
            raise InputError(str(err).replace(str(upload.path), "the key file given")) from None
    return JSONResponse({"ok": True})


def _password_and_key(job: Job, body: dict) -> tuple[str, str]:
    """The start request's password and key choice, checked (InputError says what is wrong)."""
    password, key_choice = body.get("password"), body.get("key", "none")
    if not isinstance(password, str) or not password:
        raise InputError("type the password")
    if len(password) > MAX_PASSWORD:
        raise InputError(f"the password is longer than {MAX_PASSWORD} characters")
    if job.operation == "anonymize" and body.get("confirm") != password:
        raise InputError("the two passwords differ: type the same password twice")
    if key_choice not in runs.KEY_CHOICES or (key_choice == "new" and job.operation != "anonymize"):
        raise InputError(f"unknown key choice {key_choice!r}")
    return password, key_choice


async def start_job(request: Request) -> Response:
    job = _job_of(request)
    password, key_choice = _password_and_key(job, await _json(request))
    if job.state != "open":
        raise LimitError("this run has started already")
    if not job.entries:
        raise InputError("drop at least one photo or clip first")
    job.state = "queued"
    for entry in job.entries:
        entry.state = "queued" if entry.state == "uploaded" else entry.state
    state = request.app.state
    state.worker.submit(runs.run_job, state.serving, job, password, key_choice)
    return JSONResponse(job.as_dict(), status_code=202)


async def job_status(request: Request) -> Response:
    return JSONResponse(_job_of(request).as_dict())


def _file_response(store: JobStore, job: Job, output: Output, download: bool) -> Response:
    """The result; a download marks it downloaded once sent whole, and the last one
    deletes the run (``X-Run-Deleted`` tells the page) once every download it is
    serving has ended."""
    media_type = mimetypes.guess_type(output.name)[0] or "application/octet-stream"
    headers = {}
    if download and all(each.downloaded or each is output for each in job.downloads()):
        headers[DELETED_HEADER] = "every result was downloaded"

    def sent() -> None:
        if download:
            output.downloaded = True
            if all(each.downloaded for each in job.downloads()):
                store.delete(job, "every result was downloaded")

    store.begin_download(job)
    return Download(
        store,
        job,
        sent,
        output.path,
        media_type=media_type,
        filename=output.name,
        headers=headers,
        content_disposition_type="attachment" if download else "inline",
    )


def _finished_job(request: Request) -> Job:
    job = _job_of(request)
    if job.state != "done":
        raise LimitError("the run has not finished yet")
    return job


async def result(request: Request) -> Response:
    job = _finished_job(request)
    index, k = request.path_params["index"], request.path_params["k"]
    outputs = job.entries[index].outputs if index < len(job.entries) else []
    if k >= len(outputs):
        return _error("no such result", 404)
    download = request.query_params.get("download") == "1"
    return _file_response(_store(request), job, outputs[k], download)


async def extra(request: Request) -> Response:
    job = _finished_job(request)
    k = request.path_params["k"]
    if k >= len(job.extras):
        return _error("no such result", 404)
    download = request.query_params.get("download") == "1"
    return _file_response(_store(request), job, job.extras[k], download)


async def zipped(request: Request) -> Response:
    store, job = _store(request), _finished_job(request)
    store.begin_download(job)
    try:
        path = await run_in_threadpool(results_zip, job)
    except BaseException:
        store.end_download(job)
        raise
    why = "the results were downloaded as a zip"
    return Download(
        store,
        job,
        lambda: store.delete(job, why),
        path,
        media_type="application/zip",
        filename="dbaf-results.zip",
        headers={DELETED_HEADER: why},
    )


async def delete_job(request: Request) -> Response:
    job = _job_of(request)
    if job.state in ("queued", "running"):
        raise LimitError("the run is still going; clear it when it has finished")
    _store(request).delete(job, "cleared on the page")
    return JSONResponse({"ok": True})


async def _refused(request: Request, err: Exception) -> Response:
    """What the API answers to a refusal: its message, with the status that says which."""
    status = (
        401
        if isinstance(err, UnknownSession)
        else 404
        if isinstance(err, NotFound)
        else 413
        if isinstance(err, LimitError)
        else 400
    )
    return _error(str(err), status)


ROUTES = [
    Route("/", index),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
    Route("/api/session", new_session, methods=["POST"]),
    Route("/api/session", end_session, methods=["DELETE"]),
    Route("/api/jobs", create_job, methods=["POST"]),
    Route("/api/jobs/{job}", job_status, methods=["GET"]),
    Route("/api/jobs/{job}", delete_job, methods=["DELETE"]),
    Route("/api/jobs/{job}/files", add_file, methods=["PUT"]),
    Route("/api/jobs/{job}/key/{part}", add_key_part, methods=["PUT"]),
    Route("/api/jobs/{job}/start", start_job, methods=["POST"]),
    Route("/api/jobs/{job}/results/{index:int}/{k:int}", result, methods=["GET"]),
    Route("/api/jobs/{job}/extras/{k:int}", extra, methods=["GET"]),
    Route("/api/jobs/{job}/zip", zipped, methods=["GET"]),
]
REFUSALS = {NotFound: _refused, LimitError: _refused, InputError: _refused}


def build_app(
    serving: runs.Serving | None, store: JobStore, allowed_hosts: list[str] | None = None
) -> Starlette:
    """The app serving the page and its API (`ROUTES`) with ``serving``'s model and
    settings, keeping jobs in ``store``; ``allowed_hosts`` (default the loopback names)
    are the Host headers answered. Jobs run one at a time on one worker thread; a
    janitor thread expires idle ones while the app runs."""
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS),
        Middleware(SecurityHeaders),
        Middleware(SameOrigin),
    ]
    app = Starlette(
        routes=ROUTES, middleware=middleware, exception_handlers=REFUSALS, lifespan=_lifespan
    )
    app.state.serving, app.state.store = serving, store
    app.state.worker = concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="dbaf-web-job"
    )
    app.state.stopping = threading.Event()
    return app


def results_zip(job: Job) -> Path:
    """Every result of ``job`` and its summary in one zip in the job's folder (stored, not
    compressed: PNGs and clips are compressed already; names made unique), built by the
    first request for it and written atomically, then served to every request."""
    path = job.folder / "results.zip"
    with job.zip_lock:
        if path.exists():
            return path

        def write(tmp: Path) -> None:
            taken: set[str] = set()
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
                archive.writestr("summary.txt", job.summary)
                taken.add("summary.txt")
                for output in job.downloads():
                    archive.write(output.path, _unique(output.name, taken))

        return atomic_files.write_file(path, write)


def _unique(name: str, taken: set[str]) -> str:
    stem, dot, suffix = name.partition(".")
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{stem} ({n}){dot}{suffix}"
    taken.add(candidate)
    return candidate
