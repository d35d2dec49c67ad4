"""Charts draw with no network: pmtk's Altair renderer, and the page in headless Chromium."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import altair as alt
import polars as pl
import pytest

from tests.notebooks.charts_dom import NETWORK_SCRIPT, chart_specs, count_charts
from toolkit.notebooks import CHART_RENDERER, chart_html, setup_charts, vega_script

HOSTILE = "</script><script>document.title='pwned'</script> & <b>"


@pytest.fixture
def pmtk_renderer() -> Iterator[None]:
    """setup_charts() for one test; Altair's renderer is put back afterwards."""
    before = alt.renderers.active
    setup_charts()
    yield
    alt.renderers.enable(before)


def _bar_chart(labels: list[str]) -> alt.Chart:
    data = pl.DataFrame({"label": labels, "value": list(range(1, len(labels) + 1))})
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(x=alt.X("value:Q", title="Value"), y=alt.Y("label:N", title="Label"))
        .properties(title="Bars")
    )


def _page(tmp_path: Path, *parts: str) -> Path:
    page = tmp_path / "page.html"
    body = "\n".join(parts)
    page.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>charts</title></head>'
        f"<body>{body}</body></html>",
        encoding="utf-8",
    )
    return page


def test_setup_charts_enables_a_renderer_that_loads_nothing_from_the_network(
    pmtk_renderer: None,
) -> None:
    assert alt.renderers.active == CHART_RENDERER
    bundle = _bar_chart(["a", "b"])._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    html = data["text/html"]
    assert 'class="pmtk-chart"' in html
    assert "vegaEmbed" in html
    assert not NETWORK_SCRIPT.search(html)
    assert "cdn." not in html
    assert data["text/plain"] == "<Altair chart: Bars>"


def test_vega_script_is_one_inline_script_that_defines_vega_embed() -> None:
    script = vega_script()
    assert script.startswith("<script")
    assert len(re.findall(r"</script", script, re.IGNORECASE)) == 1
    assert script.rstrip().endswith("</script>")
    assert "window.vegaEmbed=" in script
    assert not NETWORK_SCRIPT.search(script)


def test_spec_text_cannot_close_the_script_and_reads_back_unchanged() -> None:
    spec = _bar_chart(["plain", HOSTILE]).to_dict()
    html = chart_html(spec)
    assert html.count("</script>") == 1
    assert "<b>" not in html
    assert chart_specs(html) == [spec]


def test_embed_options_merge_over_the_offline_defaults() -> None:
    html = chart_html({"mark": "bar"}, {"renderer": "canvas"})
    options = re.search(r"^var options = (\{.*\});$", html, re.MULTILINE)
    assert options is not None
    assert '"renderer": "canvas"' in options.group(1)
    assert '"editor": false' in options.group(1)


def test_charts_draw_in_chromium_with_the_network_blocked(
    chromium: Callable[[Path], str], tmp_path: Path
) -> None:
    bars = _bar_chart(["plain", HOSTILE]).to_dict()
    line = (
        alt.Chart(pl.DataFrame({"x": [1, 2, 3], "y": [3, 1, 2]}))
        .mark_line()
        .encode(x="x:Q", y="y:Q")
        .to_dict()
    )
    dom = chromium(_page(tmp_path, vega_script(), chart_html(bars), chart_html(line)))
    counted = count_charts(dom)
    assert counted.errors == ()
    assert (counted.containers, counted.drawn) == (2, 2)
    assert "<title>charts</title>" in dom, "text in the data ran as a script"
    assert "document.title='pwned'" in dom, "the hostile label is drawn as text"


def test_a_chart_without_the_libraries_says_so_instead_of_staying_blank(
    chromium: Callable[[Path], str], tmp_path: Path
) -> None:
    dom = chromium(_page(tmp_path, chart_html(_bar_chart(["a"]).to_dict())))
    counted = count_charts(dom)
    assert counted.drawn == 0
    assert len(counted.errors) == 1
    assert "setup_charts()" in counted.errors[0]


def test_the_blocked_network_really_blanks_a_cdn_chart(
    chromium: Callable[[Path], str], tmp_path: Path
) -> None:
    """Control: Altair's own page loads Vega from a CDN, and must fail here."""
    page = tmp_path / "cdn.html"
    html = _bar_chart(["a"]).to_html()
    assert NETWORK_SCRIPT.search(html), "Altair's page no longer loads from a CDN"
    page.write_text(html, encoding="utf-8")
    dom = chromium(page)
    assert "<svg" not in dom
    assert "vega-embed" not in dom.split("<body>", 1)[1].split("<script")[0]
