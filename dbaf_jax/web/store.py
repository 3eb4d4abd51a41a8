"""The web page's job store: every job of one server under one private folder (mode
0700) made when the server starts and removed when it stops, each job's folder removed
when its results are downloaded, when it was never started or has been idle too long
(`jobs.Limits`); the sessions (pages) that own the jobs, bounded per client; and the
private folders of servers killed before they could remove theirs (`remove_stale_roots`).
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path

from dbaf_jax.storage import atomic_files
from dbaf_jax.web.jobs import OPERATIONS, Job, LimitError, Limits, NotFound, UnknownSession

ROOT_PREFIX = "dbaf-web-"
MAX_SESSIONS = 10_000  # over all clients (pages open at once): new ones are refused past it
GONE_REMEMBERED = 10_000  # ids of deleted jobs kept to say why they are gone


@dataclasses.dataclass
class _Session:
    """An issued session secret's client (its address) and last use."""

    client: str
    touched: float = dataclasses.field(default_factory=time.monotonic)


class JobStore:
    """The jobs of one server under one private folder, and the sessions (pages) that
    own them; thread-safe (the page's requests and the worker that runs jobs use it at
    once).

    A new session never evicts another: each client (address) holds at most
    `Limits.sessions`, and a session unused for `Limits.keep_seconds` without a job, or
    ended by its page, goes. A job goes when its results are downloaded, when its page
    clears it, when it was never started within `Limits.open_seconds`, or when it has
    been idle for `Limits.keep_seconds`; its folder stays until every download it is
    serving has finished (`begin_download`, `end_download`)."""

    def __init__(self, limits: Limits, parent: str | Path | None = None):
        self.limits = limits
        remove_stale_roots(parent)
        self.root = Path(
            tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-", dir=parent)
        )  # mode 0700
        self._jobs: dict[str, Job] = {}
        self._sessions: dict[str, _Session] = {}
        self._gone: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def new_session(self, client: str) -> str:
        """A new session secret for a page of ``client``; LimitError when that client
        holds `Limits.sessions` already (or the server `MAX_SESSIONS`)."""
        with self._lock:
            held = sum(session.client == client for session in self._sessions.values())
            if held >= self.limits.sessions or len(self._sessions) >= MAX_SESSIONS:
                raise LimitError(
                    f"{held} pages of this server are open from {client} already: close one, or wait until "
                    f"those unused for {self.limits.keep_seconds / 60:g} minutes expire"
                )
            secret = secrets.token_urlsafe(32)
            self._sessions[secret] = _Session(client)
        return secret

    def end_session(self, session: str) -> None:
        """The page of ``session`` has gone: the session ends, and so do its jobs once
        they are not running (`expire`)."""
        with self._lock:
            self._session(session)
            del self._sessions[session]
        self.expire()

    def _session(self, session: str) -> _Session:
        """The known session ``session``, touched; UnknownSession otherwise (lock held)."""
        found = next(
            (
                self._sessions[known]
                for known in self._sessions
                if hmac.compare_digest(session, known)
            ),
            None,
        )
        if found is None:
            raise UnknownSession(
                "unknown session (the page was closed, or unused too long): reload the page"
            )
        found.touched = time.monotonic()
        return found

    def create(self, session: str, operation: str) -> Job:
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {OPERATIONS}, got {operation!r}")
        with self._lock:
            self._session(session)
            if len(self._jobs) >= self.limits.jobs:
                raise LimitError(
                    f"the server holds {self.limits.jobs} runs already; download or clear a finished one first"
                )
            job_id = secrets.token_urlsafe(16)
            folder = self.root / job_id
            folder.mkdir(mode=0o700)
            job = Job(job_id, session, operation, folder, self.limits)
            self._jobs[job_id] = job
        return job

    def get(self, job_id: str, session: str) -> Job:
        """The job ``job_id`` if ``session`` owns it, else NotFound (the same for a job of
        another session as for none, so ids of other sessions cannot be probed)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and hmac.compare_digest(job.session, session):
                self._session(session)
                job.touched = time.monotonic()
                return job
            gone = self._gone.get(job_id)
            if gone is not None and hmac.compare_digest(gone[0], session):
                raise NotFound(f"this run's files were deleted ({gone[1]})")
        raise NotFound("no such run")

    def begin_download(self, job: Job) -> None:
        """A download of ``job``'s files starts: they stay until it ends (`end_download`);
        NotFound when the job was deleted meanwhile."""
        with self._lock:
            if self._jobs.get(job.id) is not job:
                why = self._gone.get(job.id, ("", "it is gone"))[1]
                raise NotFound(f"this run's files were deleted ({why})")
            job.serving += 1
            job.touched = time.monotonic()

    def end_download(self, job: Job) -> None:
        """A download `begin_download` counted has ended (sent whole or not); the last
        one of a deleted job removes its folder."""
        with self._lock:
            job.serving -= 1
            remove = job.serving == 0 and job.id not in self._jobs
        if remove:
            shutil.rmtree(job.folder, ignore_errors=True)

    def delete(self, job: Job, why: str) -> None:
        """Deletes ``job``: no request finds it any more (they are told ``why``), and its
        folder goes now, or when the last download it is serving ends."""
        with self._lock:
            remove = self._forget(job, why)
        if remove:
            shutil.rmtree(job.folder, ignore_errors=True)

    def _forget(self, job: Job, why: str) -> bool:
        """``job`` out of the store, remembered as gone for ``why`` (lock held); whether
        its folder is to be removed now (it serves no download)."""
        if self._jobs.pop(job.id, None) is None:
            return False
        if len(self._gone) >= GONE_REMEMBERED:
            self._gone.pop(next(iter(self._gone)))
        self._gone[job.id] = (job.session, why)
        return not job.serving

    def expire(self, now: float | None = None) -> list[str]:
        """Deletes the jobs (never running ones, nor ones serving a download) that were
        not started within `Limits.open_seconds`, have been idle for
        `Limits.keep_seconds`, or whose page has gone; and the sessions unused for
        `Limits.keep_seconds` that hold no job. The ids of the jobs deleted."""
        now = time.monotonic() if now is None else now
        limits = self.limits
        removed = []
        with self._lock:
            for job in list(self._jobs.values()):
                if job.state in ("queued", "running") or job.serving:
                    continue
                idle = now - job.touched
                why = (
                    "its page was closed"
                    if job.session not in self._sessions
                    else f"not started within {limits.open_seconds / 60:g} minutes"
                    if job.state == "open" and idle > limits.open_seconds
                    else f"not used for {limits.keep_seconds / 60:g} minutes"
                    if idle > limits.keep_seconds
                    else None
                )
                if why is not None:
                    removed.append((job, self._forget(job, why)))
            owners = {job.session for job in self._jobs.values()}
            for secret, session in list(self._sessions.items()):
                if secret not in owners and now - session.touched > limits.keep_seconds:
                    del self._sessions[secret]
        for job, remove in removed:
            if remove:
                shutil.rmtree(job.folder, ignore_errors=True)
        return [job.id for job, _ in removed]

    def close(self) -> None:
        """Removes every job and the private folder (the server is stopping)."""
        with self._lock:
            self._jobs.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def remove_stale_roots(parent: str | Path | None = None) -> list[Path]:
    """Removes the private folders servers of this user left when killed (their process
    is gone), so that their uploads do not stay on disk; the folders removed."""
    parent = Path(parent or tempfile.gettempdir())
    removed = []
    for folder in parent.glob(f"{ROOT_PREFIX}*-*"):
        pid = folder.name[len(ROOT_PREFIX) :].split("-", 1)[0]
        try:
            owned = (
                folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
            )
        except OSError:
            continue
        if owned and pid.isdigit() and not atomic_files.process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
