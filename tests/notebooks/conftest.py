"""Headless Chromium with the network blocked, for tests that open rendered pages.

``chromium`` (session fixture) is a function ``dump_dom(page: Path) -> str``: it
loads ``page`` from disk in a fresh profile, lets scripts run for a virtual-time
budget, and returns the DOM as the page then stands. Every request to the
network goes to a dead proxy (``127.0.0.1:9``) and every host name resolves to
nothing, so a page that needs a CDN shows it.

The browser is Debian's ``chromium-headless-shell`` (or ``chromium``);
``PMTK_CHROMIUM`` names another binary. ``.ci/run`` installs it. When it is
missing the tests fail under CI (``CI`` set) and are skipped elsewhere, with the
install command in the message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolkit.notebooks import RenderResult, execute_notebook, notebook_paths, render_html

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
CHARTED = ("02", "03", "04", "05")

BROWSERS = ("chromium-headless-shell", "chromium")
INSTALL = "apt-get install -y chromium-headless-shell"

# The flags Chromium needs on a closed machine (no background fetches, no sandbox
# as root), plus the two that cut every page request off from the network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=20000",
)


def find_chromium() -> str | None:
    """Path of the headless browser, or ``None``."""
    named = os.environ.get("PMTK_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium() -> Callable[[Path], str]:
    """``dump_dom(page)``: the page's DOM after its scripts ran, offline."""
    binary = find_chromium()
    if binary is None:
        message = f"headless Chromium is not installed: {INSTALL} (or set PMTK_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)

    def dump_dom(page: Path) -> str:
        with tempfile.TemporaryDirectory(prefix="pmtk-chromium-") as profile:
            completed = subprocess.run(
                [binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        if completed.returncode != 0 or "<html" not in completed.stdout:
            msg = (
                f"{binary} could not load {page} (exit {completed.returncode}):\n"
                f"{completed.stderr[-2000:]}"
            )
            raise AssertionError(msg)
        return completed.stdout

    return dump_dom


# The test that fails when any cell of notebooks 02 to 05 fails in ``executed_notebooks``.
EVERY_CELL_RUNS = "test_every_cell_runs_when_rendering"


@pytest.hookimpl(trylast=True)  # after -k/-m have deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run notebooks 02 to 05 once: not also as nbmake items when the render tests run.

    ``executed_notebooks`` executes them for the render tests, and
    ``test_every_cell_runs_when_rendering`` fails on a failing cell just as nbmake
    would; nbmake still runs notebook 01, and any notebook when the render tests
    are not selected.
    """
    if not any(item.name == EVERY_CELL_RUNS for item in items):
        return
    charted = {p.resolve() for p in notebook_paths(NOTEBOOK_DIR, CHARTED)}
    again = [i for i in items if i.path.suffix == ".ipynb" and i.path.resolve() in charted]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [i for i in items if i not in again]


@pytest.fixture(scope="session")
def executed_notebooks() -> list[tuple[Path, Any, str | None, float]]:
    """Notebooks 02 to 05 executed once (notebook, executed node, error, seconds)."""
    import time

    out = []
    for path in notebook_paths(NOTEBOOK_DIR, CHARTED):
        began = time.perf_counter()
        nb, error = execute_notebook(path, timeout=120)
        out.append((path, nb, error, time.perf_counter() - began))
    return out


def _pages(
    executed: list[tuple[Path, Any, str | None, float]], out: Path, *, report: bool
) -> list[RenderResult]:
    results = []
    for path, nb, error, seconds in executed:
        target = out / f"{path.stem}.html"
        target.write_text(render_html(nb, report=report), encoding="utf-8")
        results.append(RenderResult(path, target, seconds, error))
    return results


@pytest.fixture(scope="session")
def rendered(
    executed_notebooks: list[tuple[Path, Any, str | None, float]],
    tmp_path_factory: pytest.TempPathFactory,
) -> list[RenderResult]:
    """The pages of ``pmtk notebooks --html``: every cell, code included."""
    return _pages(executed_notebooks, tmp_path_factory.mktemp("html"), report=False)


@pytest.fixture(scope="session")
def reports(
    executed_notebooks: list[tuple[Path, Any, str | None, float]],
    tmp_path_factory: pytest.TempPathFactory,
) -> list[RenderResult]:
    """The pages of ``pmtk notebooks --report``: no code, key figures first."""
    return _pages(executed_notebooks, tmp_path_factory.mktemp("reports"), report=True)
