"""``pmtk notebooks --html``: the charting notebooks render to pages that draw offline.

Rendering executes the notebooks again (the notebook tests already ran them), so
one rendering of notebooks 02 to 05 is shared by every assertion, including the
one that opens each page in headless Chromium with the network blocked and
counts the charts vega-embed drew.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.notebooks.charts_dom import NETWORK_SCRIPT, chart_specs, count_charts
from toolkit.notebooks import RenderResult, notebook_paths, notebooks_command, render_notebooks

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
CHARTED = ("02", "03", "04", "05")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[RenderResult]:
    out = tmp_path_factory.mktemp("html")
    return render_notebooks(out, notebooks=notebook_paths(NOTEBOOK_DIR, CHARTED), timeout=120)


def test_every_cell_runs_when_rendering(rendered: list[RenderResult]) -> None:
    assert [r.notebook.name[:2] for r in rendered] == list(CHARTED)
    failures = {r.notebook.name: r.error for r in rendered if not r.ok}
    assert not failures


def test_html_embeds_vega_lite_charts(rendered: list[RenderResult]) -> None:
    for result in rendered:
        html = result.html.read_text(encoding="utf-8")
        assert "vegaEmbed" in html, result.html.name
        specs = chart_specs(html)
        assert specs, f"{result.html.name} has no chart"
        for spec in specs:
            assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


def test_every_chart_has_a_title_and_axis_labels(rendered: list[RenderResult]) -> None:
    for result in rendered:
        for spec in chart_specs(result.html.read_text(encoding="utf-8")):
            assert spec.get("title"), f"untitled chart in {result.html.name}"
            for layer in spec.get("layer", [spec]):
                encoding = layer.get("encoding", {})
                for channel in ("x", "y"):
                    if channel in encoding:
                        assert encoding[channel].get("title"), (
                            f"{channel} axis without a label in {spec['title']!r}"
                        )


def test_html_keeps_the_tables(rendered: list[RenderResult]) -> None:
    for result in rendered:
        html = result.html.read_text(encoding="utf-8")
        assert "gt_table" in html, f"{result.html.name} shows no great-tables table"


def test_command_reports_an_unknown_selection_without_running(tmp_path: Path) -> None:
    import typer

    app = typer.Typer()
    app.command()(notebooks_command)
    result = CliRunner().invoke(app, ["--html", str(tmp_path), "--only", "99"])
    assert result.exit_code == 2
    assert "no numbered notebooks" in result.output
    assert not list(tmp_path.iterdir())


def test_rendered_page_is_a_notebook_page(rendered: list[RenderResult]) -> None:
    html = rendered[0].html.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert json.dumps("What you will learn")[1:-1] in html


def test_pages_load_no_script_from_the_network(rendered: list[RenderResult]) -> None:
    for result in rendered:
        html = result.html.read_text(encoding="utf-8")
        found = NETWORK_SCRIPT.search(html)
        assert found is None, f"{result.html.name} loads {html[found.start() : found.end() + 80]}"
        assert html.count('data-pmtk="vega-libraries"') == 1, result.html.name


def test_every_chart_draws_in_headless_chromium_offline(
    rendered: list[RenderResult], chromium: Callable[[Path], str]
) -> None:
    for result in rendered:
        html = result.html.read_text(encoding="utf-8")
        expected = len(chart_specs(html))
        assert expected >= 1, f"{result.html.name} has no chart"
        dom = chromium(result.html)
        counted = count_charts(dom)
        assert "Error loading script" not in dom, result.html.name
        assert counted.errors == (), f"{result.html.name}: {counted.errors}"
        assert (counted.containers, counted.drawn) == (expected, expected), result.html.name
