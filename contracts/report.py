"""The contract report: stable JSON, JUnit XML, one self-contained HTML page, a summary table.

``report.json`` format (stable; new keys may be added, none removed)::

    {
      "format": 1,
      "target": "https://.../main",
      "started": ISO-8601, "finished": ISO-8601, "elapsed_seconds": float,
      "checks": [{"id", "category", "status": "passed|failed|skipped", "message",
                  "evidence": [{"request", "response", "curl"} | {"note"}],
                  "observed": [{"field", "rule", "source", "count", "example"}]}],
      "observations": {...},
      "summary": {"total", "passed", "failed", "skipped", "observed", "requests",
                  "by_category": {category: {"passed", "failed", "skipped", "observed"}},
                  "new_findings": [...], "fixed_findings": [...]},
      "baseline": {"file", "new", "fixed"} | null
    }
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "CheckRecord",
    "build_report",
    "compare_baseline",
    "render_summary",
    "write_reports",
]

CATEGORIES: tuple[str, ...] = (
    "auth",
    "token-lifetime",
    "rate-limit",
    "prefix",
    "enum",
    "reference",
    "format",
    "schema",
    "paging",
    "write",
)
REPORT_FORMAT = 1
MAX_OBSERVED_SHOWN = 12
"""Observation-level findings printed on the console; the reports hold all of them."""


@dataclass
class CheckRecord:
    """The outcome of one check, with its evidence."""

    id: str
    category: str
    status: str = "passed"
    message: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    observed: list[dict[str, Any]] = field(default_factory=list)
    """Observation-level findings: never a failure (a rule from the facts or pmtk, a
    reference form other than the spec's, a field absent from every record)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "status": self.status,
            "message": self.message,
            "evidence": self.evidence,
            "observed": self.observed,
        }


def _summary(checks: list[CheckRecord], requests: int) -> dict[str, Any]:
    by_category: dict[str, dict[str, int]] = {}
    for c in checks:
        counts = by_category.setdefault(
            c.category, {"passed": 0, "failed": 0, "skipped": 0, "observed": 0}
        )
        counts[c.status] = counts.get(c.status, 0) + 1
        counts["observed"] += len(c.observed)
    return {
        "total": len(checks),
        "passed": sum(c.status == "passed" for c in checks),
        "failed": sum(c.status == "failed" for c in checks),
        "skipped": sum(c.status == "skipped" for c in checks),
        "observed": sum(len(c.observed) for c in checks),
        "requests": requests,
        "by_category": dict(sorted(by_category.items(), key=lambda kv: _category_rank(kv[0]))),
        "new_findings": [],
        "fixed_findings": [],
    }


def _category_rank(category: str) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


def compare_baseline(current: list[CheckRecord], baseline: dict[str, Any]) -> dict[str, list[str]]:
    """New findings (failed now, not before) and fixed ones (failed before, passed now)."""
    before = {c["id"]: c.get("status") for c in baseline.get("checks", [])}
    now = {c.id: c.status for c in current}
    new = sorted(i for i, s in now.items() if s == "failed" and before.get(i) != "failed")
    fixed = sorted(i for i, s in before.items() if s == "failed" and now.get(i) == "passed")
    return {"new": new, "fixed": fixed}


def build_report(
    *,
    target: str,
    started: str,
    finished: str,
    elapsed: float,
    checks: list[CheckRecord],
    observations: dict[str, Any],
    requests: int,
    baseline_path: Path | None = None,
) -> dict[str, Any]:
    ordered = sorted(checks, key=lambda c: (_category_rank(c.category), c.id))
    summary = _summary(ordered, requests)
    baseline: dict[str, Any] | None = None
    if baseline_path is not None:
        old = json.loads(baseline_path.read_text(encoding="utf-8"))
        diff = compare_baseline(ordered, old)
        baseline = {"file": str(baseline_path), **diff}
        summary["new_findings"] = diff["new"]
        summary["fixed_findings"] = diff["fixed"]
    return {
        "format": REPORT_FORMAT,
        "target": target,
        "started": started,
        "finished": finished,
        "elapsed_seconds": round(elapsed, 3),
        "checks": [c.as_dict() for c in ordered],
        "observations": observations,
        "summary": summary,
        "baseline": baseline,
    }


def write_junit(report: dict[str, Any], path: Path) -> None:
    checks = report["checks"]
    suite = ET.Element(
        "testsuite",
        name="pmtk-contracts",
        tests=str(len(checks)),
        failures=str(report["summary"]["failed"]),
        skipped=str(report["summary"]["skipped"]),
        errors="0",
        time=str(report["elapsed_seconds"]),
        timestamp=report["started"],
    )
    for c in checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"contracts.{c['category']}", name=c["id"]
        )
        if c["status"] == "failed":
            failure = ET.SubElement(case, "failure", message=c["message"][:500])
            curls = [e["curl"] for e in c["evidence"] if "curl" in e]
            failure.text = c["message"] + ("\n\n" + "\n".join(curls) if curls else "")
        elif c["status"] == "skipped":
            ET.SubElement(case, "skipped", message=c["message"][:500])
        if c.get("observed"):
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(_observed_line(o) for o in c["observed"])
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    path.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>pmtk contract report: {{ report.target }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 75rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; }
td, th { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
.passed { color: #176f2c; } .failed { color: #b00020; font-weight: bold; } .skipped { color: #777; }
pre { background: #f5f5f5; padding: .6rem; overflow-x: auto; white-space: pre-wrap; }
details { margin: .4rem 0 1rem 0; }
</style></head><body>
<h1>pmtk contract report</h1>
<p>Target <code>{{ report.target }}</code>, started {{ report.started }},
finished {{ report.finished }} ({{ "%.1f"|format(report.elapsed_seconds) }} s,
{{ s.requests }} requests).</p>
<h2>Summary: {{ s.passed }} passed, {{ s.failed }} failed, {{ s.skipped }} skipped</h2>
<table><tr><th>Category</th><th>Passed</th><th>Failed</th><th>Skipped</th></tr>
{% for cat, n in s.by_category.items() %}<tr><td>{{ cat }}</td><td>{{ n.passed }}</td>
<td class="{{ 'failed' if n.failed else '' }}">{{ n.failed }}</td><td>{{ n.skipped }}</td></tr>
{% endfor %}</table>
{% if report.baseline %}<p>Against baseline <code>{{ report.baseline.file }}</code>:
new findings {{ report.baseline.new|join(", ") or "none" }};
fixed {{ report.baseline.fixed|join(", ") or "none" }}.</p>{% endif %}
<h2>Findings</h2>
{% for c in report.checks if c.status == "failed" %}
<h3 class="failed" id="{{ c.id }}">{{ c.id }} <small>({{ c.category }})</small></h3>
<pre>{{ c.message }}</pre>
{% for e in c.evidence %}<details><summary>Evidence {{ loop.index }}
{% if e.request %}: {{ e.request.method }} {{ e.request.url }} &rarr; {{ e.response.status }}
{% endif %}</summary><pre>{{ e | tojson(indent=2) }}</pre></details>{% endfor %}
{% else %}<p class="passed">No findings.</p>{% endfor %}
<h2>Observed (not failures)</h2>
<p>Rules that come from the public facts or from pmtk, reference forms other than the
spec's, and declared fields absent from every record: reported once per field.</p>
<table><tr><th>Check</th><th>Field</th><th>Rule</th><th>Source</th><th>Count</th><th>Example</th></tr>
{% for c in report.checks %}{% for o in c.observed %}<tr><td>{{ c.id }}</td><td>{{ o.field }}</td>
<td>{{ o.rule }}</td><td>{{ o.source }}</td><td>{{ o.count }}</td>
<td>{{ o.example[:300] }}</td></tr>
{% endfor %}{% endfor %}</table>
<h2>All checks</h2>
<table><tr><th>Check</th><th>Category</th><th>Status</th><th>Message</th></tr>
{% for c in report.checks %}<tr><td>{{ c.id }}</td><td>{{ c.category }}</td>
<td class="{{ c.status }}">{{ c.status }}</td><td>{{ c.message[:300] }}</td></tr>
{% endfor %}</table>
<h2>Observations</h2>
<pre>{{ report.observations | tojson(indent=2) }}</pre>
</body></html>
"""


def _observed_line(o: dict[str, Any]) -> str:
    return f"{o['field']} [{o['rule']}, {o['source']}] x{o['count']}: {o['example']}"


def write_html(report: dict[str, Any], path: Path) -> None:
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(_HTML).render(report=report, s=report["summary"])
    path.write_text(html, encoding="utf-8")


def write_reports(report: dict[str, Any], directory: Path) -> Path:
    """Write report.json, junit.xml and report.html into ``directory``; return the JSON path."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "report.json"
    out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    write_junit(report, directory / "junit.xml")
    write_html(report, directory / "report.html")
    return out


def render_summary(report: dict[str, Any]) -> Any:
    """A rich renderable: per-category counts, the findings, elapsed time."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = report["summary"]
    table = Table(title=f"pmtk check: {report['target']}")
    table.add_column("Category")
    table.add_column("Passed", justify="right", style="green")
    table.add_column("Failed", justify="right", style="red")
    table.add_column("Skipped", justify="right", style="dim")
    table.add_column("Observed", justify="right", style="yellow")
    table.add_column("Failed checks")
    for category, n in s["by_category"].items():
        failed = [c["id"] for c in report["checks"] if c["category"] == category]
        failed = [i for i in failed if _status(report, i) == "failed"]
        table.add_row(
            category,
            str(n["passed"]),
            str(n["failed"]),
            str(n["skipped"]),
            str(n.get("observed", 0)),
            "\n".join(failed),
        )
    lines: list[Table | Text] = [
        table,
        Text(
            f"{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped, "
            f"{s.get('observed', 0)} observed (not failures); "
            f"{s['requests']} requests in {report['elapsed_seconds']:.1f} s"
        ),
    ]
    observed = [o for c in report["checks"] for o in c.get("observed", [])]
    for o in observed[:MAX_OBSERVED_SHOWN]:
        lines.append(Text(f"observed: {_observed_line(o)}"[:200]))
    if len(observed) > MAX_OBSERVED_SHOWN:
        more = len(observed) - MAX_OBSERVED_SHOWN
        lines.append(Text(f"observed: ... and {more} more in report.json / report.html"))
    if report.get("baseline"):
        b = report["baseline"]
        lines.append(
            Text(
                f"against baseline: {len(b['new'])} new finding(s) {', '.join(b['new'])}; "
                f"{len(b['fixed'])} fixed {', '.join(b['fixed'])}"
            )
        )
    return Group(*lines)


def _status(report: dict[str, Any], check_id: str) -> str:
    for c in report["checks"]:
        if c["id"] == check_id:
            return str(c["status"])
    return "unknown"
