"""The web page's job store: every job of one server under one private folder (mode
0700) made when the server starts and removed when it stops, each job's folder removed
when its results are downloaded or it has been idle too long (`jobs.Limits`); and the
private folders of servers killed before they could remove theirs (`remove_stale_roots`).
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path

from dbaf_jax import atomic_files
from dbaf_jax.web.jobs import OPERATIONS, Job, LimitError, Limits, NotFound

ROOT_PREFIX = "dbaf-web-"
MAX_SESSIONS = 10_000
GONE_REMEMBERED = 10_000  # ids of deleted jobs kept to say why they are gone


class JobStore:
    """The jobs of one server under one private folder; thread-safe (the page's requests
    and the worker that runs jobs use it at once)."""

    def __init__(self, limits: Limits, parent: str | Path | None = None):
        self.limits = limits
        remove_stale_roots(parent)
        self.root = Path(
            tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-", dir=parent)
        )  # mode 0700
        self._jobs: dict[str, Job] = {}
        self._sessions: dict[str, None] = {}  # issued secrets, oldest first
        self._gone: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def new_session(self) -> str:
        secret = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[secret] = None
            if (
                len(self._sessions) > MAX_SESSIONS
            ):  # every page load makes one: the oldest go (their runs expire)
                self._sessions.pop(next(iter(self._sessions)))
        return secret

    def create(self, session: str, operation: str) -> Job:
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {OPERATIONS}, got {operation!r}")
        with self._lock:
            if not any(hmac.compare_digest(session, known) for known in self._sessions):
                raise NotFound("unknown session: reload the page")
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
                job.touched = time.monotonic()
                return job
            gone = self._gone.get(job_id)
            if gone is not None and hmac.compare_digest(gone[0], session):
                raise NotFound(f"this run's files were deleted ({gone[1]})")
        raise NotFound("no such run")

    def delete(self, job: Job, why: str) -> None:
        with self._lock:
            if self._jobs.pop(job.id, None) is None:
                return
            if len(self._gone) >= GONE_REMEMBERED:
                self._gone.pop(next(iter(self._gone)))
            self._gone[job.id] = (job.session, why)
        shutil.rmtree(job.folder, ignore_errors=True)

    def expire(self, now: float | None = None) -> list[str]:
        """Deletes the jobs idle for longer than `Limits.keep_seconds` (not those running); their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                job
                for job in self._jobs.values()
                if job.state not in ("queued", "running")
                and now - job.touched > self.limits.keep_seconds
            ]
        for job in idle:
            self.delete(job, f"not used for {self.limits.keep_seconds / 60:g} minutes")
        return [job.id for job in idle]

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
