"""``pmtk notebooks --html``: the charting notebooks render to pages that draw offline.

Rendering executes the notebooks (nbmake then leaves 02 to 05 to these tests), so
one execution of notebooks 02 to 05 (``executed_notebooks`` in ``conftest.py``) is
shared by every assertion, and by the reports of ``test_report.py``, including the
one that opens each page in headless Chromium with the network blocked and
counts the charts vega-embed drew.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html import escape, unescape
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.notebooks.charts_dom import (
    NETWORK_SCRIPT,
    chart_specs,
    count_charts,
    drawn_charts,
    overlapping_texts,
    with_overlap_probe,
)
from tests.notebooks.conftest import CHARTED
from toolkit import Client
from toolkit.notebooks import MAX_CHART_WIDTH, RenderResult, notebooks_command

pytestmark = pytest.mark.slow


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


# --------------------------------------------------------------------------- reports

REPORTED = ("02", "03", "04", "05")
YEAR = re.compile(r"\b(?:19|20)\d{2}\b")
DATE_AXIS = re.compile(r"time scale|\d{2} [A-Z][a-z]+ \d{4}")
SUMMARY = '<section class="pmtk-summary"'
INPUT_ELEMENT = re.compile(
    r'class="[^"]*\b(?:jp-InputPrompt|jp-CodeMirrorEditor|jp-InputArea-editor|highlight)\b'
)


def _report(reports: list[RenderResult], prefix: str) -> str:
    (page,) = [r for r in reports if r.notebook.name.startswith(prefix)]
    return page.html.read_text(encoding="utf-8")


def _figure(html: str, label: str) -> str:
    found = re.search(
        r'<th scope="row"[^>]*>' + re.escape(escape(label)) + r"</th>\s*<td[^>]*>([^<]*)</td>", html
    )
    assert found, f"no key figure {label!r}"
    return unescape(found.group(1))


@pytest.fixture(scope="module")
def mock_frames(mock_deployment: Any) -> dict[str, pl.DataFrame]:
    """The session mock's tables, listed over HTTP: the same data the notebooks' mock serves."""
    mock_deployment.reset_rate_limit()
    with Client(
        mock_deployment.base_url,
        mock_deployment.client_id,
        mock_deployment.client_secret,
        requests_per_minute=None,
        progress=False,
        user_agent="pmtk tests (tests@example.org)",
    ) as client:
        frames: dict[str, pl.DataFrame] = {}
        for resource in ("Referral", "Appointment", "Patient", "Invoice"):
            frames.update(client.frames(resource))
    return frames


def test_reports_show_no_code(reports: list[RenderResult]) -> None:
    assert [r.notebook.name[:2] for r in reports] == list(CHARTED)
    for result in reports:
        assert result.ok, result.error
        html = result.html.read_text(encoding="utf-8")
        # (the page's CSS names these classes; no element may carry them)
        assert not INPUT_ELEMENT.search(html), result.html.name
        # What a reader sees: the page without its scripts (chart specs name columns) and CSS.
        visible = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.DOTALL)
        text = unescape(re.sub(r"<[^>]+>", "", visible))
        source = json.loads(result.notebook.read_text(encoding="utf-8"))
        for cell in source["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                if len(line.strip()) >= 12:  # short lines ("(", "SHOW = 15") prove nothing
                    assert line.strip() not in text, (
                        result.html.name,
                        line,
                    )
        assert "pmtk: nothing configured" not in html  # stderr notices stay out of a report


def test_each_report_opens_with_its_key_figures(reports: list[RenderResult]) -> None:
    for prefix in REPORTED:
        html = _report(reports, prefix)
        title, summary, intro = (
            html.find("<h1"),
            html.find(SUMMARY),
            html.find("What you will learn"),
        )
        assert -1 < title < summary < intro, prefix
        assert html.count(SUMMARY) == 1
        assert re.search(r"\d", html[summary : html.find("</section>", summary)])


# What a practice manager's page must not show: settings, functions, options and file
# paths for whoever runs the notebook (those stay in the notebook, in cells the
# report leaves out).
DEVELOPER_TEXT = re.compile(
    r"\bPM_[A-Z_]+|\b(?:analysis|toolkit|client|data|catalogue)\.[A-Za-z_]+|docs/[\w.]+"
    r"|errors=|PmtkDataWarning|(?<![\w-])--[a-z][a-z-]+|\bexit \d"
)
# Counts that must agree with their noun: "1 practitioner-weeks", "2 request".
NOUNS = (
    r"(?:free 30-minute )?"
    r"(?:practitioner-week|practitioner|week|request|slot|record|failure|check)"
)
ONE_PLURAL = re.compile(rf"(?<![\d,.])\b1 {NOUNS}s\b")
MANY_SINGULAR = re.compile(rf"(?<![\d,.])\b(?:0|[2-9]|[1-9][\d,]*\d) {NOUNS}\b(?![-s])")


def _visible(html: str) -> str:
    """The text a reader sees: the page without its scripts (chart specs) and CSS."""
    visible = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.DOTALL)
    return unescape(re.sub(r"<[^>]+>", " ", visible))


def test_reports_carry_no_developer_text(reports: list[RenderResult]) -> None:
    """Prose, printed lines, chart and table titles; not the tables' rows, which are the
    data as the deployment and the contract suite give it (a check skipped "without
    --allow-writes" says so in notebook 05's table of skipped checks)."""
    for result in reports:
        html = result.html.read_text(encoding="utf-8")
        text = _visible(re.sub(r"<tbody\b.*?</tbody>", "", html, flags=re.DOTALL))
        found = sorted({m.group(0) for m in DEVELOPER_TEXT.finditer(text)})
        assert found == [], f"{result.html.name}: {found}"


def test_reports_count_in_proper_singular_and_plural(reports: list[RenderResult]) -> None:
    for result in reports:
        text = _visible(result.html.read_text(encoding="utf-8"))
        wrong = [m.group(0) for r in (ONE_PLURAL, MANY_SINGULAR) for m in r.finditer(text)]
        assert wrong == [], f"{result.html.name}: {wrong}"


def test_the_conformance_report_says_the_requests_it_measured(
    reports: list[RenderResult],
) -> None:
    html = _report(reports, "05")
    assert "about 150" not in html
    printed = re.search(r"verdict: (?:conformant|findings); ([\d,]+) requests? in", _visible(html))
    assert printed, "the run's requests are not printed"
    figure = _figure(html, "Requests this run")
    assert figure.startswith(f"{printed.group(1)} request"), figure
    checks = _figure(html, "Checks")
    passed, failed, skipped, total = map(int, re.findall(r"\d+", checks.replace(",", "")))
    assert passed + failed + skipped == total


def test_key_figures_are_computed_from_the_data(
    reports: list[RenderResult], mock_frames: dict[str, pl.DataFrame]
) -> None:
    referral = mock_frames["Referral"]
    active = int(referral["active"].sum())
    assert (
        _figure(_report(reports, "02"), "Active referrals") == f"{active:,} of {referral.height:,}"
    )
    invoices = mock_frames["Invoice"].height
    assert _figure(_report(reports, "04"), "Invoices that reconcile with their lines") == (
        f"{invoices:,} of {invoices:,}"
    )
    appointments = mock_frames["Appointment"].height
    assert _figure(_report(reports, "03"), "Appointments").startswith(f"{appointments:,} from ")


def test_a_cut_table_says_so_and_shows_names_beside_ids(
    reports: list[RenderResult], mock_frames: dict[str, pl.DataFrame]
) -> None:
    html = _report(reports, "02")
    start = html.find("Referrals nearly used up or about to expire")
    table = html[start : html.find("</table>", start)]
    cut = re.search(r"(\d+) of (\d+) shown, most used first", table)
    assert cut, "the table does not say it is cut"
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.DOTALL)
    body = [r for r in rows if 'class="gt_row' in r]
    assert len(body) == int(cut.group(1)) < int(cut.group(2))
    # Every patient shows by name, with the id beside it, as the deployment names them.
    patients = mock_frames["Patient"]
    names = {
        pid: " ".join([*(given or []), family or ""]).strip()
        for pid, given, family in patients.select("id", "name_given", "name_family").iter_rows()
    }
    for row in body:
        cells = [unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.DOTALL)]
        patient_name, patient_id = cells[1], cells[2]
        assert patient_id in names, cells
        assert patient_name == names[patient_id], cells


def test_the_heatmap_shows_counts_beside_rates(
    reports: list[RenderResult], chromium: Callable[[Path], str]
) -> None:
    page = next(r for r in reports if r.notebook.name.startswith("03"))
    html = page.html.read_text(encoding="utf-8")
    (heatmap,) = [
        s for s in chart_specs(html) if "Did-not-attend rate" in json.dumps(s.get("title"))
    ]
    marks = [
        layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]
        for layer in heatmap["layer"]
    ]
    assert marks == ["rect", "text"]
    drawn = drawn_charts(chromium(page.html))
    counts = [re.fullmatch(r"(\d+|–)%n=(\d+)", t.text) for t in drawn.texts if "n=" in t.text]
    assert counts and all(counts), [t.text for t in drawn.texts if "n=" in t.text][:5]
    past = _figure(html, "Past appointments").split(":")[0]
    assert sum(int(c.group(2)) for c in counts if c) == int(past.replace(",", ""))


def test_every_report_chart_is_readable_at_1400_px(
    reports: list[RenderResult], chromium: Callable[[Path], str]
) -> None:
    for result in reports:
        html = result.html.read_text(encoding="utf-8")
        specs = chart_specs(html)
        for spec in specs:
            config = spec.get("config", {})
            assert config.get("legend", {}).get("labelLimit") == 0, spec.get("title")
            assert "%Y" in config.get("axisTemporal", {}).get("format", ""), spec.get("title")
        probed = result.html.with_name(f"probed-{result.html.name}")
        probed.write_text(with_overlap_probe(html), encoding="utf-8")
        dom = chromium(probed)
        counted = count_charts(dom)
        assert (counted.containers, counted.drawn) == (len(specs), len(specs)), result.html.name
        overlaps = overlapping_texts(dom)
        assert overlaps == [], f"{result.html.name}: texts drawn over each other {overlaps}"
        drawn = drawn_charts(dom)
        assert len(drawn.widths) == len(specs)
        assert max(drawn.widths) <= MAX_CHART_WIDTH, (result.html.name, drawn.widths)
        cut = [t.text for t in drawn.texts if "…" in t.text]
        assert not cut, f"{result.html.name}: cut labels {cut}"
        dated = [
            t for t in drawn.texts if "role-axis-label" in t.roles and DATE_AXIS.search(t.axis)
        ]
        yearless = [t.text for t in dated if not YEAR.search(t.text)]
        assert not yearless, f"{result.html.name}: date labels without a year {yearless}"
        if result.notebook.name.startswith("03"):
            assert dated, "notebook 03 draws no date axis"
            legend = {t.text for t in drawn.texts if "role-legend-label" in t.roles}
            clinics = {
                "Harbourside Allied Health Newtown",
                "Harbourside Allied Health Paddington",
                "Harbourside Allied Health Fremantle",
            }
            assert clinics <= legend, legend


REPORT_NOTEBOOK = {
    "cells": [
        {
            "cell_type": "markdown",
            "id": "title",
            "metadata": {},
            "source": "# 01 · Tiny\n\n**What you will learn**\n\n- a thing",
        },
        {
            "cell_type": "code",
            "id": "work",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": (
                "import sys\nprint('noise', file=sys.stderr)\n"
                "value_shown = 6 * 7\nprint(f'answer {value_shown}')"
            ),
        },
        {
            "cell_type": "code",
            "id": "figures",
            "metadata": {"tags": ["summary"]},
            "execution_count": None,
            "outputs": [],
            "source": (
                "from toolkit.notebooks import key_figures\n"
                "key_figures({'Answer': str(value_shown)})"
            ),
        },
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


def test_the_command_writes_reports(tmp_path: Path) -> None:
    import typer

    source = tmp_path / "nbs"
    source.mkdir()
    (source / "01_tiny.ipynb").write_text(json.dumps(REPORT_NOTEBOOK), encoding="utf-8")
    app = typer.Typer()
    app.command()(notebooks_command)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["--report", "--html", str(out), "--source", str(source)])
    assert result.exit_code == 0, result.output
    html = (out / "01_tiny.html").read_text(encoding="utf-8")
    assert "value_shown" not in html and "print(" not in html and "noise" not in html
    assert "answer 42" in html
    assert html.find("01 · Tiny") < html.find(SUMMARY) < html.find("What you will learn")
    assert _figure(html, "Answer") == "42"
    assert not INPUT_ELEMENT.search(html)
    # The control: without --report the same notebook's code is on the page.
    plain = tmp_path / "plain"
    result = CliRunner().invoke(app, ["--html", str(plain), "--source", str(source)])
    assert result.exit_code == 0, result.output
    page = (plain / "01_tiny.html").read_text(encoding="utf-8")
    assert INPUT_ELEMENT.search(page) and "value_shown" in page


# Marks, in the page's DOM, every word of the printed output that the browser laid
# out on more than one line (a Range over the word has rects on several lines). A
# line may end after a hyphen, as in any text: the pieces between hyphens are the words.
_BROKEN_WORD_PROBE = """<script>
window.addEventListener('load', () => {
  const broken = [];
  for (const pre of document.querySelectorAll('.jp-OutputArea-output pre')) {
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[^\\s-]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  const out = document.createElement('div');
  out.id = 'pmtk-broken-words';
  out.textContent = JSON.stringify(broken);
  document.body.appendChild(out);
});
</script>"""

LONG_LINE_NOTEBOOK = {
    **REPORT_NOTEBOOK,
    "cells": [
        REPORT_NOTEBOOK["cells"][0],
        {
            "cell_type": "code",
            "id": "long",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": (
                "print('; '.join(f'practitioner-week {n:,} of Harbourside Allied Health "
                "Paddington' for n in range(1000, 1040)))"
            ),
        },
    ],
}


def test_printed_lines_wrap_between_words_in_a_report(
    tmp_path: Path, chromium: Callable[[Path], str]
) -> None:
    import typer

    source = tmp_path / "nbs"
    source.mkdir()
    (source / "01_long.ipynb").write_text(json.dumps(LONG_LINE_NOTEBOOK), encoding="utf-8")
    app = typer.Typer()
    app.command()(notebooks_command)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["--report", "--html", str(out), "--source", str(source)])
    assert result.exit_code == 0, result.output
    page = out / "01_long.html"
    html = page.read_text(encoding="utf-8")
    assert "practitioner-week 1,039 of Harbourside" in html
    probed = page.with_name("probed.html")
    probed.write_text(html.replace("</body>", _BROKEN_WORD_PROBE + "</body>"), encoding="utf-8")
    dom = chromium(probed)
    found = re.search(r'<div id="pmtk-broken-words">(.*?)</div>', dom)
    assert found, "the probe did not run"
    assert json.loads(unescape(found.group(1))) == []
