"""The documentation holds together: every document is listed in docs/README.md, and
every relative link in README.md and docs/ leads to a file that exists."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_doc_is_listed_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text()
    listed = set(LINK.findall(index))
    missing = [doc.name for doc in DOCS if doc.name != "README.md" and doc.name not in listed]
    assert not missing, f"docs/README.md does not list {missing}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_lead_somewhere(page):
    broken = [target for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to missing {broken}"


def test_the_readme_stays_a_front_door():
    """README: what it is, install, quick start, the main commands, where to read more."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220
