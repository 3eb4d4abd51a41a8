"""The documentation holds together: every document is listed in docs/README.md, and
every relative link in README.md and docs/ leads to a file that exists."""

import re

import pytest

from tests.paths import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_doc_is_listed_in_the_index():
    index = (REPO / "docs" / "README.md").read_text()
    listed = set(LINK.findall(index))
    missing = [doc.name for doc in DOCS if doc.name != "README.md" and doc.name not in listed]
    assert not missing, f"docs/README.md does not list {missing}"


@pytest.mark.parametrize(
    "page", [REPO / "README.md", *DOCS], ids=lambda page: str(page.relative_to(REPO))
)
def test_relative_links_lead_somewhere(page):
    broken = [
        target
        for target in LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert not broken, f"{page.relative_to(REPO)} links to missing {broken}"


def test_the_readme_stays_a_front_door():
    """README: what it is, install, quick start, the main commands, where to read more."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 220
