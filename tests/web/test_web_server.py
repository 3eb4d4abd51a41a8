"""The web page's server over plain HTTP (http.client against uvicorn on a free loopback
port), without a browser or a model: sessions kept apart, the bounds on uploads (a
declared size and a streamed body past them), what is refused before a run starts,
the Host and Origin checks (another site can make, start, delete or crowd out
nothing), sessions bounded per client, downloads that overlap (the run's files stay
until the last has been sent), the headers that keep results out of caches, and the
command's refusal to listen beyond this machine without --allow-remote."""

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
import zipfile

import pytest

from dbaf_jax.storage import images
from dbaf_jax.web import jobs, serve
from dbaf_jax.web.jobs import Limits, Output
from dbaf_jax.web.store import JobStore
from tests.paths import REPO
from tests.web_serving import pixel_bomb, serving

LIMITS = Limits(file_bytes=1000, job_bytes=1500, files=4, jobs=10, sessions=12)
BOMB_LIMITS = Limits(file_bytes=1 << 20)  # the page's default --max-pixels


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(port, store) of a server with small bounds and no model (no run is started here)."""
    store = JobStore(LIMITS, tmp_path_factory.mktemp("web_server"))
    with serving(None, store, stop_seconds=30) as port:
        yield port, store


def own_origin(served) -> dict:
    """The Origin header the page's own requests carry."""
    return {"Origin": f"http://127.0.0.1:{served[0]}"}


def call(served, method, path, body=None, headers=None, chunked=False):
    """(status, parsed JSON or raw bytes, headers) of one request, with the page's own
    Origin unless ``headers`` say another (``"Origin": None``: none)."""
    connection = http.client.HTTPConnection("127.0.0.1", served[0], timeout=30)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    headers = {**own_origin(served), **(headers or {})}
    headers = {name: value for name, value in headers.items() if value is not None}
    connection.request(method, path, body=body, headers=headers, encode_chunked=chunked)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    try:
        data = json.loads(data)
    except ValueError:
        pass
    return response.status, data, dict(response.getheaders())


def new_job(served, operation="anonymize"):
    status, reply, _ = call(served, "POST", "/api/session")
    assert status == 200
    session = {"X-Session": reply["session"]}
    status, reply, _ = call(served, "POST", "/api/jobs", {"operation": operation}, session)
    assert status == 200, reply
    return session, reply["job"]


def put_file(served, session, job, name, body, chunked=False, **headers):
    return call(
        served,
        "PUT",
        f"/api/jobs/{job}/files",
        body,
        {**session, "X-File-Name": name, **headers},
        chunked,
    )


def test_sessions_do_not_see_each_others_runs(served):
    session, job = new_job(served)
    other, _ = new_job(served)
    assert put_file(served, session, job, "a.png", b"x" * 10)[0] == 200
    for headers in (other, {}, {"X-Session": "guess"}):
        status, reply, _ = call(served, "GET", f"/api/jobs/{job}", headers=headers)
        assert (status, reply) == (
            404,
            {"error": "no such run"},
        )  # the same answer as for an id that never was
    assert call(served, "GET", "/api/jobs/nothing", headers=session)[:2] == (
        404,
        {"error": "no such run"},
    )
    status, reply, _ = call(served, "GET", f"/api/jobs/{job}", headers=session)
    assert (
        status == 200 and reply["files"][0]["name"] == "a.png" and reply["files"][0]["size"] == 10
    )
    status, reply, _ = call(
        served, "POST", "/api/jobs", {"operation": "anonymize"}, {"X-Session": "made-up"}
    )
    assert status == 401 and reply["error"].endswith("reload the page")


def test_browser_names_never_choose_a_path(served):
    session, job = new_job(served)
    status, reply, _ = put_file(served, session, job, "..%2F..%2Fevil%2F..%2Fx.png", b"y")
    assert status == 200 and reply["name"] == "x.png"
    stored = list((served[1].root / job / "in").rglob("*"))
    assert [p.name for p in stored if p.is_file()] == ["input.png"]
    assert not (served[1].root / "evil").exists()


def test_uploads_past_the_bounds_are_refused_and_named(served):
    session, job = new_job(served)
    status, reply, _ = put_file(served, session, job, "big.png", b"", **{"X-File-Size": "5000"})
    assert (status, reply) == (
        413,
        {"error": "big.png: 4.9 KB is over the limit of 1000 bytes per file"},
    )
    # A body past the bound without a declared size: cut off, and nothing of it stays on disk.
    status, reply, _ = put_file(
        served,
        session,
        job,
        "streamed.png",
        iter([b"z" * 600, b"z" * 600]),
        chunked=True,
        **{"Transfer-Encoding": "chunked"},
    )
    assert status == 413 and reply["error"].startswith("streamed.png: ")
    assert not [p for p in (served[1].root / job).rglob("*") if p.is_file()]
    assert put_file(served, session, job, "a.png", b"a" * 900)[0] == 200
    status, reply, _ = put_file(served, session, job, "b.png", b"b" * 900)
    assert status == 413 and "the run would hold more than" in reply["error"]
    status, reply, _ = put_file(served, session, job, "c.png", b"c")
    assert (
        status == 413
        and reply["error"] == "c.png: at most 4 files per run; start another run for the rest"
    )
    files = call(served, "GET", f"/api/jobs/{job}", headers=session)[1]["files"]
    assert [(f["name"], f["state"]) for f in files] == [
        ("big.png", "skipped"),
        ("streamed.png", "skipped"),
        ("a.png", "uploaded"),
        ("b.png", "skipped"),
    ]
    assert "over the limit" in files[0]["message"]


def test_a_photo_over_the_pixel_limit_is_refused_on_upload_and_nothing_stays(tmp_path):
    """The hostile trial's 164 KB PNG of 13000 x 13000 pixels (which drove the server to
    23.5 GB once started): its upload is answered 413 with the command line's one line,
    after its whole body was read (a browser still sending gets the answer); nothing of
    it is on disk, and the run holds it only as skipped, so it cannot be started."""
    store = JobStore(BOMB_LIMITS, tmp_path)
    with serving(None, store, stop_seconds=30) as port:
        served = (port, store)
        session, job = new_job(served)
        status, reply, _ = put_file(served, session, job, "bomb.png", pixel_bomb())
        line = (
            "bomb.png: 13000 x 13000 = 169,000,000 pixels, over the limit of 120,000,000 "
            "(the server's --max-pixels): not decoded"
        )
        assert (status, reply) == (413, {"error": line})
        assert not [p for p in store.root.rglob("*") if p.is_file()]
        files = call(served, "GET", f"/api/jobs/{job}", headers=session)[1]["files"]
        assert [(f["name"], f["state"], f["message"]) for f in files] == [
            ("bomb.png", "skipped", line)
        ]
        status, reply, _ = call(
            served, "POST", f"/api/jobs/{job}/start", {"password": "p", "confirm": "p"}, session
        )
        assert status == 202  # started with nothing to run: the summary names the bomb
        for _ in range(100):
            state = call(served, "GET", f"/api/jobs/{job}", headers=session)[1]
            if state["state"] == "done":
                break
            time.sleep(0.1)
        assert line in state["summary"] and state["status"] == 3


def test_a_run_is_refused_before_it_starts_without_what_it_needs(served):
    session, job = new_job(served)
    start = f"/api/jobs/{job}/start"
    assert call(served, "POST", start, {"password": "pw", "confirm": "pw"}, session)[1] == {
        "error": "drop at least one photo or clip first"
    }
    put_file(served, session, job, "a.png", b"a")
    assert call(served, "POST", start, {"password": ""}, session)[1] == {
        "error": "type the password"
    }
    status, reply, _ = call(
        served, "POST", start, {"password": "secret-1", "confirm": "secret-2"}, session
    )
    assert status == 400 and reply == {
        "error": "the two passwords differ: type the same password twice"
    }
    status, reply, _ = call(served, "PUT", f"/api/jobs/{job}/key/key", b"not a key file", session)
    assert status == 400 and reply["error"].startswith("the key file given is not a key file")
    assert not (served[1].root / job / "key" / "dbaf.key").exists()


def test_other_hosts_are_refused_and_nothing_is_cached(served):
    assert call(served, "GET", "/", headers={"Host": "attacker.example"})[0] == 400  # DNS rebinding
    status, page, headers = call(served, "GET", "/")
    assert status == 200 and b"Anonymize" in page
    assert (
        headers["cache-control"] == "no-store"
        and "default-src 'self'" in headers["content-security-policy"]
    )


EVIL = "http://evil.example"


def test_another_site_can_make_start_delete_or_end_nothing(served):
    """A page of another site sends what a browser lets it (simple POSTs carry its
    Origin; a DELETE or a PUT first asks with OPTIONS): every one is refused, nothing
    is made, and the page's own session goes on."""
    session, job = new_job(served)
    sessions_before = len(served[1]._sessions)
    foreign = {"Origin": EVIL, **session}
    attempts = [
        ("POST", "/api/session", None),
        ("DELETE", "/api/session", None),
        ("POST", "/api/jobs", {"operation": "anonymize"}),
        ("PUT", f"/api/jobs/{job}/files", b"x"),
        ("POST", f"/api/jobs/{job}/start", {"password": "pw", "confirm": "pw"}),
        ("DELETE", f"/api/jobs/{job}", None),
        ("OPTIONS", "/api/session", None),
        ("GET", f"/api/jobs/{job}", None),
    ]
    for method, path, body in attempts * 3:
        status, reply, _ = call(served, method, path, body, foreign)
        assert status == 403 and reply["error"].startswith(f"a request from another site ({EVIL})")
    status, reply, _ = call(served, "POST", "/api/session", headers={"Origin": None})
    assert status == 403 and "no Origin header" in reply["error"]
    status, reply, _ = call(
        served, "GET", f"/api/jobs/{job}", headers={**session, "Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403
    assert len(served[1]._sessions) == sessions_before
    status, reply, _ = call(served, "GET", f"/api/jobs/{job}", headers=session)
    assert status == 200 and reply["state"] == "open" and reply["files"] == []


def test_sessions_are_bounded_per_client_never_evicted_and_ended_by_their_page(tmp_path):
    store = JobStore(Limits(sessions=3), tmp_path)
    with serving(None, store, stop_seconds=30) as port:
        served = (port, store)
        secrets = [call(served, "POST", "/api/session")[1]["session"] for _ in range(3)]
        status, reply, _ = call(served, "POST", "/api/session")
        assert status == 413 and "3 pages of this server are open from 127.0.0.1" in reply["error"]
        for secret in secrets:  # none of them was pushed out
            assert (
                call(served, "POST", "/api/jobs", {"operation": "recover"}, {"X-Session": secret})[
                    0
                ]
                == 200
            )
        assert call(served, "DELETE", "/api/session", headers={"X-Session": secrets[0]})[0] == 200
        assert not [job for job in store._jobs.values() if job.session == secrets[0]]
        status, reply, _ = call(
            served, "POST", "/api/jobs", {"operation": "recover"}, {"X-Session": secrets[0]}
        )
        assert status == 401
        assert call(served, "POST", "/api/session")[0] == 200  # its slot is free again


def finished_job(served, size: int):
    """A job of a new session made finished by hand (no model here): one result of
    ``size`` random bytes; (its session headers, id, the result's bytes)."""
    session, job_id = new_job(served)
    job = served[1].get(job_id, session["X-Session"])
    data = os.urandom(size)
    path = job.output_path(job.new_entry("a.png", None))
    (path / "result.png").write_bytes(data)
    job.entries[0].outputs = [Output("a.png", path / "result.png")]
    job.summary, job.state = "summary: 1 photo(s)\n", "done"
    return session, job, data


def started(served, path, session):
    """A GET whose response has begun and is left unread: (socket, the bytes read so far)."""
    sock = socket.create_connection(("127.0.0.1", served[0]), timeout=60)
    headers = "".join(f"{name}: {value}\r\n" for name, value in session.items())
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{served[0]}\r\n{headers}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    return sock, head


def read_rest(sock, head: bytes) -> bytes:
    """The body of the response whose start is ``head`` (Content-Length framed)."""
    header, _, body = head.partition(b"\r\n\r\n")
    assert header.startswith(b"HTTP/1.1 200"), header
    length = int(
        next(
            line.split(b":")[1]
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    while len(body) < length:
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the download early"
        body += chunk
    sock.close()
    return body


def gone_when(condition) -> None:
    """Waits for ``condition`` (what the server does once a response has been sent: a run
    deleted, its files removed); the bound is a guard against a hang."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("the server did not do what follows the end of a download")


@pytest.mark.parametrize("what", ["zip", "result"])
def test_a_second_download_is_never_cut_off_by_the_first(served, what):
    """Two downloads of one run's results overlap (a double click): the first to end
    deletes the run for new requests, but its files stay until the other has been sent
    whole; the zip is built once; afterwards nothing of the run is left."""
    session, job, data = finished_job(served, 48 << 20)  # more than the sockets' buffers hold
    path = (
        f"/api/jobs/{job.id}/zip" if what == "zip" else f"/api/jobs/{job.id}/results/0/0?download=1"
    )
    slow, head = started(served, path, session)
    status, fast, headers = call(served, "GET", path, headers=session)
    assert status == 200 and headers["x-run-deleted"]
    gone_when(lambda: job.id not in served[1]._jobs)  # once the server has seen it sent whole
    status, reply, _ = call(served, "GET", f"/api/jobs/{job.id}", headers=session)
    assert status == 404 and reply["error"].startswith("this run's files were deleted")
    assert job.folder.exists()  # the first download is still being sent
    assert read_rest(slow, head) == fast
    if what == "zip":
        with zipfile.ZipFile(io.BytesIO(fast)) as archive:
            assert (
                archive.read("a.png") == data
                and archive.read("summary.txt") == job.summary.encode()
            )
    else:
        assert fast == data
    gone_when(lambda: not job.folder.exists())


def test_a_download_cut_off_by_its_client_does_not_count(served):
    session, job, data = finished_job(served, 48 << 20)
    sock, _ = started(served, f"/api/jobs/{job.id}/zip", session)
    sock.close()  # the browser gave up: the results are not downloaded
    gone_when(lambda: job.serving == 0)
    status, reply, _ = call(served, "GET", f"/api/jobs/{job.id}", headers=session)
    assert status == 200 and reply["state"] == "done"
    status, fast, _ = call(served, "GET", f"/api/jobs/{job.id}/zip", headers=session)
    assert status == 200
    gone_when(lambda: not job.folder.exists())


@pytest.mark.slow  # two interpreters that import JAX
def test_the_command_listens_on_this_machine_only_unless_asked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dbaf_jax.web", "--model", str(tmp_path), "--host", "0.0.0.0"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode == 2
        and "--host 0.0.0.0 is reachable from other machines: add --allow-remote" in done.stderr
    )
    done = subprocess.run(
        [sys.executable, "-m", "dbaf_jax.web", "--model", str(tmp_path / "none")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and [
        line for line in done.stderr.splitlines() if line.startswith("error: ")
    ], done.stderr


def test_the_servers_pixel_limit_bounds_its_uploads_and_its_runs(monkeypatch, tmp_path):
    """--max-pixels (default `jobs.MAX_PIXELS`, below the command line's) is both the
    uploads' bound (`Limits.pixels`) and the runs' (`FolderRunSettings.max_pixels`)."""
    built = {}

    def stop(limits, temp_dir):  # the store the server would serve from, made after listening
        built["limits"] = limits
        raise SystemExit("stopped")

    monkeypatch.setattr(serve.Model, "load", lambda *args: "model")
    monkeypatch.setattr(serve, "listen", lambda host, port: None)
    monkeypatch.setattr(serve, "JobStore", stop)
    monkeypatch.setattr(serve.runs, "Serving", lambda *args: built.setdefault("serving", args))
    for given, expected in (([], jobs.MAX_PIXELS), (["--max-pixels", "5000"], 5000)):
        built.clear()
        with pytest.raises(SystemExit, match="stopped"):
            serve.main(["--model", str(tmp_path), *given])
        assert built["limits"].pixels == built["serving"][1].max_pixels == expected
    assert jobs.MAX_PIXELS == 120_000_000 < images.MAX_PIXELS
