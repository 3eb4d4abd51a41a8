"""Where the tests find the repository and their data, from any folder under tests/, and
whether this machine lets a test mount a private file system over a path."""

import shutil
import subprocess
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent  # the repository root
DATA = TESTS / "data"  # the real photos and clips tests use


def can_mount_tmpfs(path: str | Path, options: str) -> bool:
    """Whether this machine lets an unprivileged process mount a private tmpfs with
    ``options`` over ``path`` (a user and mount namespace: nothing outside sees it)."""
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
    command = f"mount -t tmpfs -o {options} tmpfs '{path}'"
    return subprocess.run([*probe, command], capture_output=True).returncode == 0
