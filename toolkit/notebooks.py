"""Execute the analysis notebooks and render them to HTML: ``pmtk notebooks --html DIR``.

Each notebook runs in a fresh kernel with its own folder as the working
directory, exactly as nbmake runs it in CI, so it reaches whatever deployment
``toolkit.connect()`` resolves: the embedded mock by default, or a real one
through ``PM_BASE_URL``, ``PM_CLIENT_ID`` and ``PM_CLIENT_SECRET``. The HTML keeps
every output, including the Altair charts (their Vega-Lite specs are embedded
and drawn by ``vegaEmbed`` when the page is opened).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = [
    "RenderResult",
    "default_notebook_dir",
    "execute_notebook",
    "notebook_paths",
    "notebooks_command",
    "render_html",
    "render_notebooks",
]


@dataclass(frozen=True, slots=True)
class RenderResult:
    """The outcome of executing and rendering one notebook.

    Attributes
    ----------
    notebook
        The source notebook.
    html
        The HTML file written (also written when a cell failed, up to that cell).
    seconds
        Wall-clock execution time.
    error
        The failing cell's error text, or ``None`` when every cell ran.
    """

    notebook: Path
    html: Path
    seconds: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every cell ran without error."""
        return self.error is None


def default_notebook_dir() -> Path:
    """The ``notebooks/`` folder: beside the package in a checkout, else under the cwd.

    Returns
    -------
    Path
        The folder holding ``NN_*.ipynb``.
    """
    beside_package = Path(__file__).resolve().parent.parent / "notebooks"
    if beside_package.is_dir():
        return beside_package
    return Path.cwd() / "notebooks"


def notebook_paths(directory: Path | None = None, only: Sequence[str] = ()) -> list[Path]:
    """The numbered notebooks (``NN_name.ipynb``) of a folder, in order.

    Parameters
    ----------
    directory
        Folder to look in; :func:`default_notebook_dir` when ``None``.
    only
        Keep notebooks whose file name starts with one of these (``"02"``,
        ``"03_appointments"``); all when empty.

    Returns
    -------
    list[Path]
        Sorted notebook paths.

    Raises
    ------
    FileNotFoundError
        When the folder holds no numbered notebook, or ``only`` matches none.
    """
    folder = directory if directory is not None else default_notebook_dir()
    found = sorted(p for p in folder.glob("*.ipynb") if p.name[:2].isdigit() and p.name[2:3] == "_")
    if only:
        found = [p for p in found if any(p.name.startswith(o) for o in only)]
    if not found:
        which = f" matching {', '.join(only)}" if only else ""
        msg = f"no numbered notebooks{which} in {folder}"
        raise FileNotFoundError(msg)
    return found


def execute_notebook(
    path: Path,
    *,
    timeout: int = 300,
    kernel_name: str = "python3",
) -> tuple[Any, str | None]:
    """Run every cell of a notebook in a fresh kernel, in the notebook's folder.

    Parameters
    ----------
    path
        The ``.ipynb`` file; it is read, not changed.
    timeout
        Seconds allowed per cell.
    kernel_name
        Jupyter kernel to start (the venv's ``python3`` by default).

    Returns
    -------
    tuple[nbformat.NotebookNode, str | None]
        The executed notebook (outputs filled in, up to a failing cell) and the
        error text of the failing cell, or ``None``.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        return nb, str(exc)
    return nb, None


def render_html(nb: Any) -> str:
    """HTML of an executed notebook, with its outputs (charts included).

    Parameters
    ----------
    nb
        A notebook node, as returned by :func:`execute_notebook`.

    Returns
    -------
    str
        A standalone HTML page (nbconvert's ``lab`` template).
    """
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    return str(body)


def render_notebooks(
    out_dir: Path,
    *,
    notebooks: Sequence[Path] | None = None,
    timeout: int = 300,
) -> list[RenderResult]:
    """Execute notebooks and write one HTML page per notebook into ``out_dir``.

    Parameters
    ----------
    out_dir
        Folder for the HTML pages (created if missing); ``NN_name.html`` each.
    notebooks
        Notebooks to render; every numbered notebook of
        :func:`default_notebook_dir` when ``None``.
    timeout
        Seconds allowed per cell.

    Returns
    -------
    list[RenderResult]
        One result per notebook, in order. A failing notebook does not stop the
        others; check :attr:`RenderResult.ok`.
    """
    paths = list(notebooks) if notebooks is not None else notebook_paths()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[RenderResult] = []
    for path in paths:
        began = time.perf_counter()
        nb, error = execute_notebook(path, timeout=timeout)
        seconds = time.perf_counter() - began
        target = out_dir / f"{path.stem}.html"
        target.write_text(render_html(nb), encoding="utf-8")
        results.append(RenderResult(path, target, seconds, error))
    return results


def notebooks_command(
    html: Annotated[
        Path,
        typer.Option("--html", help="Folder to write the rendered HTML pages into."),
    ],
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", help="Render only notebooks whose name starts with this (repeatable)."
        ),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option("--source", help="Folder holding the notebooks (default: notebooks/)."),
    ] = None,
    timeout: Annotated[int, typer.Option(help="Seconds allowed per cell.")] = 300,
) -> None:
    """Execute the analysis notebooks and render them to HTML, charts included.

    They run against the deployment ``toolkit.connect()`` resolves: the embedded
    mock unless PM_BASE_URL, PM_CLIENT_ID and PM_CLIENT_SECRET are set.
    """
    try:
        paths = notebook_paths(source, only or ())
    except FileNotFoundError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    failed = 0
    for path in paths:
        (result,) = render_notebooks(html, notebooks=[path], timeout=timeout)
        state = "ok" if result.ok else "FAILED"
        typer.echo(f"{state:6} {result.seconds:6.1f}s  {path.name} -> {result.html}")
        if not result.ok:
            failed += 1
            typer.echo(result.error or "", err=True)
    if failed:
        raise typer.Exit(1)
