"""Charts that draw offline, and the analysis notebooks run and rendered: ``pmtk notebooks``.

Charts
    :func:`setup_charts` (the first code cell of every charting notebook) makes
    Altair draw with no network: the Vega, Vega-Lite and vega-embed libraries
    come from the ``vl-convert-python`` package and are written once into that
    cell's output, and every chart after it is a small ``<div>`` and a call to
    the already loaded ``vegaEmbed``. The same output works in JupyterLab, in
    Jupyter Notebook and in the HTML pages below, none of which then loads a
    script from a CDN.
Notebooks
    Each notebook runs in a fresh kernel with its own folder as the working
    directory, exactly as ``uv run pytest`` runs it in CI (``conftest.py`` uses
    :func:`execute_notebook` too), so it reaches whatever deployment
    ``toolkit.connect()`` resolves: the embedded mock by default, or a real one
    through ``PM_BASE_URL``, ``PM_CLIENT_ID`` and ``PM_CLIENT_SECRET``. The HTML
    page keeps every output and references no script on the network.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit.config import project_root
from toolkit.errors import PmtkError
from toolkit.notebook_data import NotebookData, notebook_data, notebook_store_dir
from toolkit.words import plural

__all__ = [
    "CHART_CLASS",
    "CHART_CONFIG",
    "CHART_RENDERER",
    "CHART_THEME",
    "MAX_CHART_WIDTH",
    "REPORT_HIDE_TAG",
    "REPORT_SUMMARY_TAG",
    "KeyFigures",
    "MissingExtra",
    "NotebookData",
    "RenderResult",
    "chart_html",
    "default_html_dir",
    "default_notebook_dir",
    "execute_notebook",
    "kernel_manager_class",
    "key_figures",
    "notebook_data",
    "notebook_paths",
    "notebook_store_dir",
    "notebooks_command",
    "plural",
    "render_html",
    "render_notebooks",
    "report_cells",
    "require_notebook_modules",
    "setup_charts",
    "vega_script",
]

#: Name under which :func:`setup_charts` registers its Altair renderer.
CHART_RENDERER = "pmtk"
#: CSS class of every chart container; a drawn chart holds vega-embed's ``<svg>``.
CHART_CLASS = "pmtk-chart"
#: Name of the Altair theme :func:`setup_charts` enables (see :data:`CHART_CONFIG`).
CHART_THEME = "pmtk"
#: Cells with this tag are moved to the top of a report (``render_html(report=True)``).
REPORT_SUMMARY_TAG = "summary"
#: Cells with this tag are left out of a report (how a table was made, not what it says).
REPORT_HIDE_TAG = "report-hide"
#: Widest a chart may draw, in CSS pixels: a report page is read at 1400 px.
MAX_CHART_WIDTH = 1400

#: The Vega-Lite config of pmtk's theme. Names are never cut: Vega's defaults
#: truncate legend labels at 160 px and axis labels at 180 px ("Harbourside
#: Allied Health Frema…"), so both limits are lifted. Dates always carry their
#: year: Vega's default time format prints "December" alone, so a year boundary
#: reads "December … December".
CHART_CONFIG: dict[str, Any] = {
    "legend": {"labelLimit": 0, "titleLimit": 0, "symbolLimit": 0},
    # With labelLimit 0 an axis draws its title over long labels: 1000 px is "no limit".
    "axis": {"labelLimit": 1000, "titleLimit": 1000},
    "axisTemporal": {"format": "%d %b %Y", "labelOverlap": "greedy", "labelAngle": -35},
    # Vega places a category axis's title by an estimate of its labels' width, which
    # long names exceed: the title ("Funder") was drawn over them. Above the labels,
    # horizontal, it cannot collide with them.
    "axisYDiscrete": {
        "titleAngle": 0,
        "titleAlign": "right",
        "titleBaseline": "bottom",
        "titleX": -8,
        "titleY": -4,
    },
    "header": {"labelLimit": 0, "titleLimit": 0},
    "title": {"anchor": "start", "limit": 0, "subtitleColor": "#555"},
}

# vega-embed's defaults, except: SVG rather than canvas (sharper in print and
# countable in a DOM dump), and no "Open in Vega Editor" action, which needs the network.
_EMBED_DEFAULTS: dict[str, Any] = {
    "mode": "vega-lite",
    "renderer": "svg",
    "actions": {"export": True, "source": True, "compiled": True, "editor": False},
}

_MISSING_LIBRARY = (
    "This chart needs the Vega libraries, which toolkit.notebooks.setup_charts() writes"
    " into the output of the notebook's first code cell: run that cell, then this one."
)


_GLOBALS_SNIPPET = "window.vegaEmbed = vegaEmbed; window.vegaLite = vegaLite; window.vega = vega;"


def _cache_dir() -> Path:
    """pmtk's cache folder: ``$XDG_CACHE_HOME/pmtk``, else ``~/.cache/pmtk``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pmtk"


def _vega_bundle() -> str:
    """vl-convert's JavaScript bundle, cached on disk per vl-convert and Vega-Lite version.

    Building it takes vl-convert 4 to 20 seconds, once per kernel without the
    cache, so every notebook run would pay it. A cache file that cannot be
    read or written is not an error: the bundle is then built again.
    """
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    vl_version = vl_version_for_vl_convert()
    converter = importlib.metadata.version("vl-convert-python")
    cached = _cache_dir() / f"vega-embed-{converter}-{vl_version}.js"
    try:
        text = cached.read_text(encoding="utf-8")
    except OSError:
        text = ""
    # A bundle ends with the snippet that publishes vegaEmbed; an empty or foreign file does not.
    if "window.vegaEmbed=" in text[-400:]:
        return text
    text = vl_convert.javascript_bundle(_GLOBALS_SNIPPET, vl_version=vl_version)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=cached.parent, suffix=".tmp", delete=False
        ) as handle:
            handle.write(text)
        os.replace(handle.name, cached)
    except OSError:
        pass
    return text


@functools.cache
def vega_script() -> str:
    """The ``<script>`` element that defines ``window.vegaEmbed``, with no network access.

    The bundle (Vega, Vega-Lite and vega-embed, about 0.9 MB) is the one
    ``vl-convert-python`` builds for the Vega-Lite version Altair targets,
    cached under ``~/.cache/pmtk`` (or ``$XDG_CACHE_HOME/pmtk``). It runs inside
    a function, so that its top-level names do not leak into the page, and only
    when ``vegaEmbed`` is not yet defined, so that running :func:`setup_charts`
    twice is harmless.

    Returns
    -------
    str
        HTML holding one inline ``<script>``.
    """
    bundle = _vega_bundle()
    # "</script" inside the code would end the element early; "<\\/" means the
    # same in every JavaScript string, template and regex literal.
    bundle = re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)
    return (
        '<script type="text/javascript" data-pmtk="vega-libraries">\n'
        'if (typeof window.vegaEmbed !== "function") { (function () {\n'
        f"{bundle}\n"
        "})(); }\n"
        "</script>"
    )


def _json_for_script(value: Any) -> str:
    """JSON that is also safe inside an HTML ``<script>`` (no ``</script>`` breakout)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def chart_html(spec: dict[str, Any], embed_options: dict[str, Any] | None = None) -> str:
    """HTML that draws one Vega-Lite chart with the already loaded ``vegaEmbed``.

    Parameters
    ----------
    spec
        The Vega-Lite specification (``chart.to_dict()``).
    embed_options
        vega-embed options, merged over pmtk's defaults (SVG renderer, no
        editor link).

    Returns
    -------
    str
        A ``<div class="pmtk-chart">`` and the ``<script>`` that fills it. If
        the Vega libraries are missing, or the spec fails, the div says so in
        text instead of staying blank.
    """
    options = {**_EMBED_DEFAULTS, **(embed_options or {})}
    div_id = f"{CHART_CLASS}-{uuid.uuid4().hex}"
    # The spec sits alone on its line, so that tests and tools can read it back.
    return (
        f'<div class="{CHART_CLASS}" id="{div_id}"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"var spec = {_json_for_script(spec)};\n"
        f"var options = {_json_for_script(options)};\n"
        # JupyterLab runs output scripts after attaching them, so the div is the
        # script's previous sibling; the id is the fallback.
        "var el = document.currentScript && document.currentScript.previousElementSibling;\n"
        f'if (!el || el.id !== "{div_id}") {{ el = document.getElementById("{div_id}"); }}\n'
        "function fail(message) {\n"
        '  el.className += " pmtk-chart-error"; el.textContent = message;\n'
        "}\n"
        'if (typeof window.vegaEmbed !== "function") {\n'
        f"  fail({json.dumps(_MISSING_LIBRARY)});\n"
        "} else {\n"
        "  window.vegaEmbed(el, spec, options)\n"
        '    .catch(function (err) { fail("Chart error: " + err); });\n'
        "}\n"
        "})();\n"
        "</script>"
    )


def _chart_renderer(spec: dict[str, Any], **metadata: Any) -> dict[str, str]:
    """Altair renderer: the chart's HTML, and a line of text for plain consoles."""
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    label = f"<Altair chart: {title}>" if title else "<Altair chart>"
    return {"text/html": chart_html(spec, metadata.get("embed_options")), "text/plain": label}


def _chart_theme() -> Any:
    """Altair theme: :data:`CHART_CONFIG` over Altair's default size."""
    return {"config": {"view": {"continuousWidth": 300, "continuousHeight": 300}, **CHART_CONFIG}}


def setup_charts() -> None:
    """Make Altair charts draw offline, in JupyterLab, Jupyter and rendered HTML alike.

    Registers and enables the ``pmtk`` Altair renderer (:func:`chart_html`)
    and theme (:data:`CHART_CONFIG`: whole names in legends and axes, the year
    on every date axis), and, inside an IPython kernel, displays :func:`vega_script` as this cell's
    output so that every later chart in the page finds ``vegaEmbed``. Call it
    once, in the notebook's first code cell; calling it again is harmless.
    Outside IPython only the renderer is set.

    Notes
    -----
    Altair's default ``html`` renderer loads Vega from a CDN, which leaves every
    chart blank ("Error loading script") without network access. To save a
    single chart as a standalone page, use ``chart.save(path, inline=True)``.
    """
    import altair as alt

    if CHART_RENDERER not in alt.renderers.names():
        alt.renderers.register(CHART_RENDERER, _chart_renderer)
    alt.renderers.enable(CHART_RENDERER)
    if CHART_THEME not in alt.theme.names():
        alt.theme.register(CHART_THEME, enable=False)(_chart_theme)
    alt.theme.enable(CHART_THEME)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    display(
        {
            "text/html": vega_script(),
            "text/plain": "Charts: Vega-Lite drawn offline (libraries embedded in this output).",
        },
        raw=True,
    )


@dataclass(frozen=True)
class KeyFigures:
    """The figures that matter, shown as a box at the top of a report.

    Build it with :func:`key_figures` in a cell tagged ``summary``; the report
    (``pmtk notebooks --report``) moves that cell to just under the title.

    Attributes
    ----------
    title
        The box's heading.
    figures
        ``(label, value)`` pairs, already formatted, in reading order.
    note
        One line under the figures (where the numbers come from, "as of").
    """

    title: str
    figures: tuple[tuple[str, str], ...]
    note: str = ""

    def _repr_html_(self) -> str:
        from html import escape

        rows = "".join(
            f'<tr><th scope="row" style="text-align:left;padding-right:1.5em">{escape(label)}</th>'
            f'<td style="text-align:left">{escape(value)}</td></tr>'
            for label, value in self.figures
        )
        note = f'<p class="pmtk-summary-note">{escape(self.note)}</p>' if self.note else ""
        return (
            '<section class="pmtk-summary" style="border:1px solid #ccc;border-radius:6px;'
            'padding:0.6em 1.2em;margin:0.5em 0;max-width:60em;background:#fafafa">'
            f'<h2 style="margin-top:0.3em">{escape(self.title)}</h2>'
            '<table style="border-collapse:collapse;font-size:1.05em">'
            f"<tbody>{rows}</tbody></table>{note}</section>"
        )

    def __str__(self) -> str:
        width = max((len(label) for label, _ in self.figures), default=0)
        lines = [self.title, *(f"  {label:<{width}}  {value}" for label, value in self.figures)]
        if self.note:
            lines.append(f"  ({self.note})")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def key_figures(
    figures: Sequence[tuple[str, str]] | dict[str, str],
    *,
    title: str = "In short",
    note: str = "",
) -> KeyFigures:
    """The summary box that opens a notebook's report.

    Parameters
    ----------
    figures
        ``label -> value`` (a dict or pairs), each value already formatted
        (computed from the data: never typed in).
    title
        The box's heading.
    note
        One line under the figures.

    Returns
    -------
    KeyFigures
        Displays as an HTML box in Jupyter and in the rendered page, and as
        aligned text elsewhere.

    Examples
    --------
    >>> print(key_figures({"Active referrals": "120", "Need attention": "29"}))
    In short
      Active referrals  120
      Need attention    29
    """
    pairs = tuple(figures.items()) if isinstance(figures, dict) else tuple(figures)
    return KeyFigures(title, tuple((str(k), str(v)) for k, v in pairs), note)


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


SHIPPED_NOTEBOOKS = Path(__file__).resolve().parent / "_notebooks"
"""The notebooks inside an installed pmtk: the wheel carries a copy of the repository's
``notebooks/`` here (``force-include`` in pyproject.toml), so a project that installed
``pmtk-practice`` runs its reports without the repository."""

NOTEBOOK_MODULES = ("nbformat", "nbclient", "nbconvert", "ipykernel", "jupyter_client")
"""What executing and rendering a notebook imports: the ``notebooks`` extra."""

EXTRA_INSTALL = 'pip install "pmtk-practice[notebooks]" (or: uv add "pmtk-practice[notebooks]")'


class MissingExtra(PmtkError, ImportError):
    """A command needs an optional extra of pmtk that is not installed; the message
    names the missing modules and the install command."""


def require_notebook_modules() -> None:
    """Refuse, naming the ``notebooks`` extra, when a module notebooks need is missing.

    Raises
    ------
    MissingExtra
        ``pmtk notebooks needs the "notebooks" extra ... (missing: nbformat, ...)``.
    """
    import importlib.util

    missing = [m for m in NOTEBOOK_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        msg = (
            f'running the notebooks needs the "notebooks" extra of pmtk, which is not '
            f"installed (missing: {', '.join(missing)}): {EXTRA_INSTALL}"
        )
        raise MissingExtra(msg)


def default_notebook_dir() -> Path:
    """The notebooks to run: the checkout's ``notebooks/``, else the ones pmtk ships.

    In a checkout, the ``notebooks/`` folder beside the package; in an installed
    pmtk, the copy inside the package (:data:`SHIPPED_NOTEBOOKS`); else
    ``notebooks/`` under the working directory.

    Returns
    -------
    Path
        The folder holding ``NN_*.ipynb``.
    """
    beside_package = Path(__file__).resolve().parent.parent / "notebooks"
    if beside_package.is_dir():
        return beside_package
    if SHIPPED_NOTEBOOKS.is_dir():
        return SHIPPED_NOTEBOOKS
    return Path.cwd() / "notebooks"


def default_html_dir() -> Path:
    """Where ``pmtk notebooks`` writes its pages without ``--html``: the project's ``build/``.

    ``build/notebooks`` under the project root (:func:`toolkit.config.project_root`,
    the nearest folder up with ``.git`` or ``pyproject.toml``), so the command run in
    ``docs/`` does not make ``docs/build/``; outside any project, under the working
    directory.
    """

    root = project_root()
    return (root if root is not None else Path.cwd()) / "build" / "notebooks"


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
        hint = (
            "; --only keeps the notebooks whose name starts with it (01 ... 05)"
            if only
            else "; pass --source DIR, a folder of NN_name.ipynb notebooks"
            + ("" if directory is not None else ", or leave it out to run pmtk's own")
        )
        msg = f"no numbered notebooks{which} in {folder}{hint}"
        raise FileNotFoundError(msg)
    return found


def kernel_manager_class() -> type[Any]:
    """A kernel manager class whose kernels talk over CurveZMQ-encrypted TCP when they can.

    ipykernel warns "Kernel is running over TCP without encryption" for every
    kernel started without keys. With ``transport_encryption="auto"`` the
    manager provisions keys whenever pyzmq has CurveZMQ and the kernelspec
    declares support (ipykernel's does), so the warning has no cause.

    Returns
    -------
    type
        A subclass of ``jupyter_client.manager.AsyncKernelManager``, for
        ``nbclient.NotebookClient(kernel_manager_class=...)`` (which then
        starts and shuts down the kernel itself).
    """
    return _encrypted_kernel_manager()


@functools.cache
def _encrypted_kernel_manager() -> type[Any]:
    import zmq
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class EncryptedKernelManager(AsyncKernelManager):
        """``AsyncKernelManager`` with CurveZMQ transport encryption on by default."""

        @default("transport_encryption")
        def _default_transport_encryption(self) -> str:
            return "auto" if zmq.has("curve") else "disabled"

    return EncryptedKernelManager


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
    require_notebook_modules()
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(
        nb,
        kernel_manager_class=kernel_manager_class(),
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        return nb, str(exc)
    return nb, None


# nbconvert's "lab" page loads require.js, MathJax and mermaid from CDNs. The
# notebooks need none of them (charts bring their own libraries, see
# setup_charts), and a page that works offline must not try to fetch them.
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_css -%}
<style type="text/css" data-pmtk="output-wrap">
/* The lab page breaks printed lines anywhere (word-break: break-all), cutting words,
   names and numbers in two: wrap between words, and break a word only when it alone
   is wider than the page. */
.jp-OutputArea-output pre { word-break: normal; overflow-wrap: break-word; }
</style>
{%- endblock html_head_css -%}
"""


def report_cells(nb: Any) -> Any:
    """A copy of an executed notebook arranged as a report for a reader, not a coder.

    Cells tagged :data:`REPORT_SUMMARY_TAG` move to just under the first cell
    (the title), so the page opens with the figures that matter; cells tagged
    :data:`REPORT_HIDE_TAG` are left out; ``stderr`` output (connection and
    store notices) is dropped. Code itself is hidden by :func:`render_html`.

    Parameters
    ----------
    nb
        A notebook node, as returned by :func:`execute_notebook`.

    Returns
    -------
    nbformat.NotebookNode
        A new notebook; ``nb`` is not changed.
    """
    import copy

    report = copy.deepcopy(nb)

    def tags(cell: Any) -> set[str]:
        return set(cell.get("metadata", {}).get("tags", []))

    kept = [c for c in report.cells if REPORT_HIDE_TAG not in tags(c)]
    summary = [c for c in kept if REPORT_SUMMARY_TAG in tags(c)]
    rest = [c for c in kept if REPORT_SUMMARY_TAG not in tags(c)]
    head = rest[:1]
    # The key figures go right under the page's title, before the introduction.
    if head and head[0].cell_type == "markdown" and head[0].source.startswith("# "):
        import nbformat

        title, _, intro = head[0].source.partition("\n")
        head = [nbformat.v4.new_markdown_cell(title)]
        if intro.strip():
            rest[0] = nbformat.v4.new_markdown_cell(intro.strip())
        else:
            rest = rest[1:]
        report.cells = head + summary + rest
    else:
        report.cells = head + summary + rest[1:]
    for cell in report.cells:
        if cell.cell_type == "code":
            cell.outputs = [
                o
                for o in cell.get("outputs", [])
                if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
            ]
    return report


def render_html(nb: Any, *, report: bool = False) -> str:
    """HTML of an executed notebook, with its outputs, that loads nothing from the network.

    Parameters
    ----------
    nb
        A notebook node, as returned by :func:`execute_notebook`.
    report
        Render for a reader: no code, no prompts, the ``summary`` cell first
        (see :func:`report_cells`). Default: the whole notebook, code included.

    Returns
    -------
    str
        A standalone HTML page: nbconvert's ``lab`` template without its CDN
        scripts (require.js, MathJax, mermaid). Charts made after
        :func:`setup_charts` draw from the libraries embedded in the page.
    """
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        template_file="pmtk_offline.html.j2",
        extra_loaders=[jinja2.DictLoader({"pmtk_offline.html.j2": _OFFLINE_TEMPLATE})],
        exclude_input=report,
        exclude_input_prompt=report,
        exclude_output_prompt=report,
    )
    body, _ = exporter.from_notebook_node(report_cells(nb) if report else nb)
    return str(body)


def render_notebooks(
    out_dir: Path,
    *,
    notebooks: Sequence[Path] | None = None,
    timeout: int = 300,
    report: bool = False,
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
    report
        Write reports (no code, the key figures first; see :func:`render_html`).

    Returns
    -------
    list[RenderResult]
        One result per notebook, in order. A failing notebook does not stop the
        others; check :attr:`RenderResult.ok`.
    """
    require_notebook_modules()  # before the folder is made: no empty build/ left behind
    paths = list(notebooks) if notebooks is not None else notebook_paths()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[RenderResult] = []
    for path in paths:
        began = time.perf_counter()
        nb, error = execute_notebook(path, timeout=timeout)
        seconds = time.perf_counter() - began
        target = out_dir / f"{path.stem}.html"
        target.write_text(render_html(nb, report=report), encoding="utf-8")
        results.append(RenderResult(path, target, seconds, error))
    return results


HtmlOption = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Folder to write the rendered HTML pages into "
        "(default: build/notebooks at the project's root).",
    ),
]
ReportOption = Annotated[
    bool,
    typer.Option(
        "--report",
        help="Render as reports: code hidden, each page opening with its key figures.",
    ),
]
OnlyOption = Annotated[
    list[str] | None,
    typer.Option("--only", help="Render only notebooks whose name starts with this (repeatable)."),
]
SourceOption = Annotated[
    Path | None,
    typer.Option(
        "--source",
        help="Folder holding the notebooks (default: the checkout's notebooks/, "
        "else the ones installed with pmtk).",
    ),
]
TimeoutOption = Annotated[int, typer.Option(help="Seconds allowed per cell.")]


def notebooks_command(
    html: HtmlOption = None,
    report: ReportOption = False,
    only: OnlyOption = None,
    source: SourceOption = None,
    timeout: TimeoutOption = 300,
) -> None:
    """Execute the analysis notebooks and render them to HTML, charts included.

    They run against the deployment ``toolkit.connect()`` resolves: the embedded
    mock unless PM_BASE_URL, PM_CLIENT_ID and PM_CLIENT_SECRET are set.
    """
    try:
        paths = notebook_paths(source, only or ())
        require_notebook_modules()
    except (FileNotFoundError, MissingExtra) as exc:
        typer.echo(f"pmtk notebooks: {exc}", err=True)
        raise typer.Exit(2) from None
    out = html if html is not None else default_html_dir()
    failed = 0
    for path in paths:
        (result,) = render_notebooks(out, notebooks=[path], timeout=timeout, report=report)
        state = "ok" if result.ok else "FAILED"
        typer.echo(f"{state:6} {result.seconds:6.1f}s  {path.name} -> {result.html}")
        if not result.ok:
            failed += 1
            typer.echo(result.error or "", err=True)
    if failed:
        raise typer.Exit(1)
