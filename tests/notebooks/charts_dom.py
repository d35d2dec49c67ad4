"""Read charts back out of pages: the specs pmtk embeds, and what Chromium drew."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
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


@dataclass(frozen=True)
class SvgText:
    """One ``<text>`` Vega drew: its words, the Vega roles around it, and its axis."""

    text: str
    roles: tuple[str, ...]
    axis: str


@dataclass
class DrawnCharts:
    """What Chromium drew: every SVG text, and the width of every chart's SVG."""

    texts: list[SvgText]
    widths: list[float]


class _SvgReader(HTMLParser):
    """Walks a DOM dump keeping the Vega ``role-*`` classes and axis descriptions in scope."""

    VOID = frozenset({"br", "img", "input", "meta", "link", "hr", "path", "rect", "line"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, tuple[str, ...], str]] = []
        self.found = DrawnCharts([], [])
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        named = {k: v or "" for k, v in attrs}
        classes = named.get("class", "").split()
        roles = tuple(c for c in classes if c.startswith("role-"))
        axis = named.get("aria-label", "") if named.get("aria-roledescription") == "axis" else ""
        if tag == "svg" and "marks" in classes:
            self.found.widths.append(float(named.get("width", "0") or 0))
        self.stack.append((tag, roles, axis))
        if tag == "text":
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if tag == "text" and self._text is not None:
            roles = tuple(r for _, rs, _ in self.stack for r in rs)
            axis = next((a for _, _, a in reversed(self.stack) if a), "")
            self.found.texts.append(SvgText("".join(self._text), roles, axis))
            self._text = None
        while self.stack:
            opened, _, _ = self.stack.pop()
            if opened == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def drawn_charts(dom: str) -> DrawnCharts:
    """Every text Vega drew in a page's DOM (with its roles and axis) and each chart's width."""
    reader = _SvgReader()
    reader.feed(dom)
    return reader.found


# Injected into a copy of a page: once the charts are drawn, every pair of texts of one
# chart that belong to different parts (an axis title and the labels of an axis, a legend
# and an axis, a title and anything) and whose boxes overlap is written into the DOM.
# Texts of one part (the rotated labels of one axis) are not compared: their boxes
# overlap while the letters do not.
_OVERLAP_SCRIPT = """
<script>
setTimeout(function () {
  function part(t) {
    var key = [], n = t.parentNode;
    while (n && n.tagName && n.tagName.toLowerCase() !== 'svg') {
      var cls = (n.getAttribute && n.getAttribute('class')) || '';
      var role = cls.split(' ').filter(function (c) { return c.indexOf('role-') === 0; });
      if (role.length) key.push(role.join(' '));
      if (n.getAttribute && n.getAttribute('aria-roledescription') === 'axis') {
        key.push(n.getAttribute('aria-label'));
      }
      n = n.parentNode;
    }
    return key.join(' < ');
  }
  var found = [];
  document.querySelectorAll('.pmtk-chart svg.marks').forEach(function (svg, chart) {
    var texts = Array.prototype.filter.call(svg.querySelectorAll('text'), function (t) {
      return t.textContent.trim() && t.getAttribute('opacity') !== '0';
    }).map(function (t) { return [t.textContent, t.getBoundingClientRect(), part(t)]; });
    for (var i = 0; i < texts.length; i++) {
      for (var j = i + 1; j < texts.length; j++) {
        var a = texts[i], b = texts[j];
        if (a[2] === b[2]) continue;
        var w = Math.min(a[1].right, b[1].right) - Math.max(a[1].left, b[1].left);
        var h = Math.min(a[1].bottom, b[1].bottom) - Math.max(a[1].top, b[1].top);
        if (w > 2 && h > 2) found.push([chart, a[0], b[0]]);
      }
    }
  });
  var pre = document.createElement('pre');
  pre.id = 'pmtk-overlaps';
  pre.textContent = JSON.stringify(found);
  document.body.appendChild(pre);
}, 4000);
</script>
"""
_OVERLAPS = re.compile(r'<pre id="pmtk-overlaps">(.*?)</pre>', re.DOTALL)


def with_overlap_probe(html: str) -> str:
    """The page with a script that lists overlapping chart texts once the charts are drawn."""
    head, body_end, tail = html.rpartition("</body>")
    return head + _OVERLAP_SCRIPT + body_end + tail


def overlapping_texts(dom: str) -> list[tuple[int, str, str]] | None:
    """``(chart, text, text)`` for each overlap the probe found; ``None`` if it did not run."""
    from html import unescape

    found = _OVERLAPS.search(dom)
    if found is None:
        return None
    return [tuple(x) for x in json.loads(unescape(found.group(1)))]
