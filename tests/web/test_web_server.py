"""The web page's server over plain HTTP (http.client against uvicorn on a free loopback
port), without a browser or a model: sessions kept apart, the bounds on uploads (a
declared size and a streamed body past them), what is refused before a run starts,
the Host check, the headers that keep results out of caches, and the command's refusal
to listen beyond this machine without --allow-remote."""

import http.client
import json
import subprocess
import sys

import pytest

from dbaf_jax.web.jobs import Limits
from dbaf_jax.web.store import JobStore
from tests.paths import REPO
from tests.web_serving import serving

LIMITS = Limits(file_bytes=1000, job_bytes=1500, files=4, jobs=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(port, store) of a server with small bounds and no model (no run is started here)."""
    store = JobStore(LIMITS, tmp_path_factory.mktemp("web_server"))
    with serving(None, store, stop_seconds=30) as port:
        yield port, store


def call(served, method, path, body=None, headers=None, chunked=False):
    """(status, parsed JSON or raw bytes, headers) of one request."""
    connection = http.client.HTTPConnection("127.0.0.1", served[0], timeout=30)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    connection.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
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
    assert (
        call(served, "POST", "/api/jobs", {"operation": "anonymize"}, {"X-Session": "made-up"})[0]
        == 404
    )


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
