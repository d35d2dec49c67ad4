"""Read charts back out of pages: the specs pmtk embeds, and what Chromium drew."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from toolkit.notebooks import CHART_CLASS

# chart_html writes each spec alone on one line: ``var spec = {...};``.
SPEC_LINE = re.compile(r"^var spec = (\{.*\});$", re.MULTILINE)
CONTAINER = re.compile(r'<div class="(' + CHART_CLASS + r'(?: [^"]*)?)" id="[^"]*">')
NETWORK_SCRIPT = re.compile(
    r"""<script\b[^>]*\bsrc\s*=\s*["']?(?:https?:)?//|import\(\s*["'](?:https?:)?//""",
    re.IGNORECASE,
)


def chart_specs(html: str) -> list[dict[str, Any]]:
    """The Vega-Lite specs of the pmtk charts in a page, in order."""
    return [json.loads(found) for found in SPEC_LINE.findall(html)]


@dataclass(frozen=True)
class ChartCount:
    """Chart containers in a DOM dump: drawn by vega-embed, failed, or blank."""

    containers: int
    drawn: int
    errors: tuple[str, ...]


def count_charts(dom: str) -> ChartCount:
    """Count the pmtk chart containers of a DOM and how many vega-embed drew.

    A chart is drawn when its container got vega-embed's class and holds an
    ``<svg>`` with at least one Vega mark group; it failed when pmtk marked it
    ``pmtk-chart-error`` (its text says why).
    """
    matches = list(CONTAINER.finditer(dom))
    drawn = 0
    errors: list[str] = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(dom)
        body = dom[match.end() : end]
        classes = match.group(1).split()
        if "pmtk-chart-error" in classes:
            errors.append(re.sub(r"<[^>]+>", "", body.split("</div>", 1)[0]))
        elif "vega-embed" in classes and "<svg" in body and 'class="mark-' in body:
            drawn += 1
    return ChartCount(len(matches), drawn, tuple(errors))
