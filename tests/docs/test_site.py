"""The documentation site builds in strict mode and its pages are whole offline.

``mkdocs build --strict`` fails on any broken link or anchor, a page left out of
the navigation, or a docstring the API reference cannot render. The home page and
one reference page are then opened in headless Chromium with the network cut off
(the ``chromium`` fixture's flags): every part must be there without a CDN.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site() -> Path:
    out = Path(tempfile.mkdtemp(prefix="pmtk-site-"))
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_every_docs_page_is_in_the_site(site: Path) -> None:
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    built = {p.parent.name for p in site.glob("*/index.html")}
    assert pages - {"index"} <= built, pages - built
    assert (site / "search" / "search_index.json").is_file()  # the search box has its index


def test_the_home_page_is_whole_offline(site: Path, chromium: Callable[[Path], str]) -> None:
    dom = chromium(site / "index.html")
    assert "pmtk turns a practice-management REST API" in dom
    assert 'type="text"' in dom and "search" in dom.lower()  # the search box
    for title in ("The lake", "The contract suite", "API reference"):
        assert title in dom, title
    assert "fonts.googleapis" not in dom


def test_a_reference_page_is_generated_from_the_docstrings(
    site: Path, chromium: Callable[[Path], str]
) -> None:
    dom = chromium(site / "reference" / "lake" / "index.html")
    for name in ("toolkit.lake.sync", "toolkit.lake.load", "apply_changes", "import_store"):
        assert name in dom, name
    assert "several writers" in dom.lower() or "many deployments" in dom.lower()


def test_the_readme_stays_a_front_page() -> None:
    """At most about 200 lines: what pmtk is, the two commands, a tour per user, links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 210
    for must in ("uv run pmtk check", "uv run pytest", "uv run mkdocs serve", "### Exit codes"):
        assert must in readme, must
    linked = set(re.findall(r"\]\(docs/([a-z-]+)\.md", readme))
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    assert pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"
