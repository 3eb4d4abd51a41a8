"""Where the tests find the repository and their data, from any folder under tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent  # the repository root
DATA = TESTS / "data"  # the real photos and clips tests use
