"""pytest runs each notebook (``*.ipynb``) it collects as one test, as ``pmtk notebooks`` does.

Each notebook executes in a fresh kernel with its own folder as the working
directory, through :func:`toolkit.notebooks.execute_notebook`, so CI and
``pmtk notebooks --html`` run notebooks in exactly one way. A test fails when a
cell raises, and its report is that cell's source and traceback.

This replaces nbmake, for two reasons: nbmake builds its own kernel manager, so
every kernel ran over unencrypted TCP and printed ipykernel's "Kernel is
running over TCP without encryption" warning, and it printed a "Learn more
about nbmake" footer after every run, with no option to turn off only that.

Options: ``--notebook-timeout SECONDS`` (per cell, default 300).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SKIPPED_FOLDERS = frozenset({".ipynb_checkpoints", "_build", ".venv"})


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--notebook-timeout``."""
    parser.getgroup("notebooks").addoption(
        "--notebook-timeout",
        type=int,
        default=300,
        help="Seconds allowed per notebook cell (default 300).",
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect a notebook as a :class:`NotebookFile`, outside checkpoint and build folders."""
    if file_path.suffix != ".ipynb" or SKIPPED_FOLDERS.intersection(file_path.parts):
        return None
    return NotebookFile.from_parent(parent, path=file_path)


class NotebookFailed(Exception):
    """A notebook cell raised; the message is nbclient's cell source and traceback."""


class NotebookFile(pytest.File):
    """One notebook file, holding one test item."""

    def collect(self) -> Iterator[pytest.Item]:
        """The notebook's single item, named after the file."""
        yield NotebookItem.from_parent(self, name=self.path.name)


class NotebookItem(pytest.Item):
    """Execute every cell of one notebook; fail on the first cell that raises."""

    def runtest(self) -> None:
        """Run the notebook in a fresh kernel, in its own folder."""
        from toolkit.notebooks import execute_notebook

        timeout = int(self.config.getoption("notebook_timeout"))
        _, error = execute_notebook(self.path, timeout=timeout)
        if error is not None:
            raise NotebookFailed(error)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | Any:
        """The failing cell and its traceback, without pytest's own frames."""
        if isinstance(excinfo.value, NotebookFailed):
            return f"{self.path.name}: a cell failed\n{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where the item comes from, for pytest's reports."""
        return self.path, 0, f"notebook {self.path.name}"
