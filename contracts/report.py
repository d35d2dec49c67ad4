"""The contract report: stable JSON, JUnit XML, one self-contained HTML page, a summary table.

``report.json`` format 2 (stable; new keys may be added, none removed)::

    {
      "format": 2,
      "target": {"base_url": "https://.../main", "embedded_mock": false},
      "scope": null | [category, ...],   (``--category``: only these were run)
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

Format 1 (pmtk before the ``target`` object) had ``"target": "<base url>"``; a format-1
report is still accepted as a ``--baseline`` (only its ``checks`` are read).

Reports are written to a staging folder inside the report directory and moved into
place only when all three files are complete, so an interrupted or failed write never
replaces an earlier report with a partial one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from toolkit.catalogue import CONTRACT_CATEGORIES

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "CATEGORIES",
    "BaselineError",
    "CheckRecord",
    "ReportDirError",
    "build_report",
    "compare_baseline",
    "failure_reason",
    "probe_report_dir",
    "public_url",
    "read_baseline",
    "render_summary",
    "target_label",
    "write_reports",
]

CATEGORIES: tuple[str, ...] = CONTRACT_CATEGORIES
"""The categories in report order: :data:`toolkit.catalogue.CONTRACT_CATEGORIES`."""
REPORT_FORMAT = 2
READABLE_FORMATS = (1, 2)
"""Formats accepted as a ``--baseline``: both carry ``checks`` with ``id`` and ``status``."""
REPORT_FILES = ("junit.xml", "report.html", "report.json")
"""Moved into place in this order: ``report.json``, what tools read, comes last."""
MAX_OBSERVED_SHOWN = 12
"""Observation-level findings printed on the console; the reports hold all of them."""
MAX_REASON_CHARS = 160
"""A failed check's reason on the console: its first problem, cut to one line."""


class BaselineError(ValueError):
    """A ``--baseline`` file that cannot be used; the message names the file and the fault."""


class ReportDirError(OSError):
    """A ``--report-dir`` that cannot be created or written; the message says why."""


def public_url(url: str) -> str:
    """``url`` without userinfo, query or fragment: what a report or console may show.

    Examples
    --------
    >>> public_url("https://me:pw@au-api.example.com/main?key=1#x")
    'https://au-api.example.com/main'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def read_baseline(path: Path) -> dict[str, Any]:
    """Read and check an earlier ``report.json`` before anything is sent.

    Parameters
    ----------
    path
        The file given as ``--baseline``.

    Returns
    -------
    dict
        The parsed report; only its ``checks`` (``id`` and ``status``) are used.

    Raises
    ------
    BaselineError
        One line naming the file and what is wrong with it (missing, a folder, not
        readable, not UTF-8 JSON, not a pmtk report, an unknown format).
    """
    where = f"--baseline {path}"
    data = _parse_json_file(path, where)
    _check_report_shape(data, where)
    return data


def _parse_json_file(path: Path, where: str) -> Any:
    """The JSON value in ``path``; a :class:`BaselineError` naming why it cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BaselineError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise BaselineError(f"{where}: is a folder; give the report.json inside it") from None
    except OSError as exc:
        raise BaselineError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{where}: not UTF-8 text (byte {exc.start}); expected a pmtk report.json"
        raise BaselineError(msg) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{where}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        raise BaselineError(msg) from None


def _check_report_shape(data: Any, where: str) -> None:
    """Raise a :class:`BaselineError` unless ``data`` is a pmtk report this version reads."""
    if not isinstance(data, dict):
        msg = f"{where}: a JSON {type(data).__name__}, not a pmtk report (an object)"
        raise BaselineError(msg)
    fmt = data.get("format")
    if "format" not in data or "checks" not in data:
        raise BaselineError(f"{where}: not a pmtk report.json (no 'format' or 'checks' key)")
    if isinstance(fmt, bool) or fmt not in READABLE_FORMATS:
        known = ", ".join(str(f) for f in READABLE_FORMATS)
        msg = f"{where}: report format {fmt!r} is not one this pmtk reads ({known})"
        raise BaselineError(msg)
    checks = data["checks"]
    if not isinstance(checks, list):
        raise BaselineError(f"{where}: 'checks' is a {type(checks).__name__}, not a list")
    for i, c in enumerate(checks):
        if not (
            isinstance(c, dict)
            and isinstance(c.get("id"), str)
            and isinstance(c.get("status"), str)
        ):
            msg = f"{where}: checks[{i}] is not an object with string 'id' and 'status'"
            raise BaselineError(msg)


def probe_report_dir(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written in it.

    Called before the first request, so that a bad ``--report-dir`` is found in a
    second, not after the whole run has spent the user's quota.

    Raises
    ------
    ReportDirError
        With the folder and the reason (a file in the way, no permission, read-only).
    """
    where = f"--report-dir {directory}"
    if directory.exists() and not directory.is_dir():
        raise ReportDirError(f"{where}: exists and is not a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportDirError(f"{where}: cannot be created ({exc.strerror or exc})") from None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".pmtk-probe-"):
            pass
    except OSError as exc:
        raise ReportDirError(f"{where}: cannot be written ({exc.strerror or exc})") from None


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
    target: dict[str, Any],
    scope: list[str] | None = None,
    started: str,
    finished: str,
    elapsed: float,
    checks: list[CheckRecord],
    observations: dict[str, Any],
    requests: int,
    baseline_path: Path | None = None,
    baseline_data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict (format 2) from which every file and the console summary are made.

    ``target`` is ``{"base_url", "embedded_mock"}``. The baseline is compared from
    ``baseline_data`` (read and checked before the run, so a report written over it
    changes nothing); without it, ``baseline_path`` is read now.
    """
    ordered = sorted(checks, key=lambda c: (_category_rank(c.category), c.id))
    summary = _summary(ordered, requests)
    baseline: dict[str, Any] | None = None
    if baseline_path is not None:
        old = baseline_data if baseline_data is not None else read_baseline(baseline_path)
        diff = compare_baseline(ordered, old)
        baseline = {"file": str(baseline_path), **diff}
        summary["new_findings"] = diff["new"]
        summary["fixed_findings"] = diff["fixed"]
    return {
        "format": REPORT_FORMAT,
        "target": target,
        "scope": scope,
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
<title>pmtk contract report: {{ report.target.base_url }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 75rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; }
td, th { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
.passed { color: #176f2c; } .failed { color: #b00020; font-weight: bold; } .skipped { color: #777; }
pre { background: #f5f5f5; padding: .6rem; overflow-x: auto; white-space: pre-wrap; }
/* A long example (a URL, a JSON value) wraps inside its cell, so no table runs off the
   page; numbers and names are short and stay whole. */
td.example, td.message { overflow-wrap: anywhere; }
details { margin: .4rem 0 1rem 0; }
</style></head><body>
<h1>pmtk contract report</h1>
<p>Target <code>{{ report.target.base_url }}</code>{% if report.target.embedded_mock %}
(the embedded mock){% endif %}, started {{ report.started }},
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
<td class="example">{{ o.example[:300] }}</td></tr>
{% endfor %}{% endfor %}</table>
<h2>All checks</h2>
<table><tr><th>Check</th><th>Category</th><th>Status</th><th>Message</th></tr>
{% for c in report.checks %}<tr><td>{{ c.id }}</td><td>{{ c.category }}</td>
<td class="{{ c.status }}">{{ c.status }}</td><td class="message">{{ c.message[:300] }}</td></tr>
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
    """Write report.json, junit.xml and report.html into ``directory``; return the JSON path.

    The three files are first written, complete, into a staging folder inside
    ``directory`` (same file system), then each is moved into place with an atomic
    ``os.replace``, ``report.json`` last. A failure or Ctrl-C while writing leaves the
    earlier reports as they were and removes the staging folder.

    Raises
    ------
    ReportDirError
        When the folder cannot be created or a file cannot be written or moved.
    """
    from toolkit.redaction import redact_json

    # The one redaction boundary: whatever a server echoed, no registered secret is written.
    report = redact_json(report)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pmtk-staging-", dir=directory))
    except OSError as exc:
        msg = f"cannot write the reports to {directory} ({exc.strerror or exc})"
        raise ReportDirError(msg) from None
    try:
        (staging / "report.json").write_text(
            json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8"
        )
        write_junit(report, staging / "junit.xml")
        write_html(report, staging / "report.html")
        for name in REPORT_FILES:
            os.replace(staging / name, directory / name)
    except OSError as exc:
        msg = f"cannot write the reports to {directory} ({exc.strerror or exc})"
        raise ReportDirError(msg) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory / "report.json"


def render_summary(
    report: dict[str, Any], *, observed_limit: int | None = MAX_OBSERVED_SHOWN
) -> Any:
    """A rich renderable: per-category counts, each failed check with its reason, time.

    Every piece of server or user text goes in as a :class:`rich.text.Text` (or through
    :func:`rich.markup.escape`), so ``[security]`` in a message stays visible and a
    stray ``[/`` cannot break the console.
    """
    from rich.console import Group
    from rich.text import Text

    s = report["summary"]
    lines: list[Table | Text] = [
        _category_table(report),
        Text(
            f"{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped, "
            f"{s.get('observed', 0)} observed (not failures); "
            f"{s['requests']} requests in {report['elapsed_seconds']:.1f} s"
            f"{_waited(report)}"
        ),
        *_data_lines(report),
        *_failure_lines(report),
        *_observed_lines(report, observed_limit),
        *_baseline_lines(report),
    ]
    return Group(*lines)


def _waited(report: dict[str, Any]) -> str:
    """``, 45.0 s of it waiting for the rate limit`` when the run waited, else nothing."""
    requests = (report.get("observations") or {}).get("requests")
    seconds = requests.get("seconds_waited_for_rate_limit") if isinstance(requests, dict) else None
    if not isinstance(seconds, int | float) or seconds <= 0:
        return ""
    return f", {seconds:.1f} s of it waiting for the rate limit"


def _data_lines(report: dict[str, Any]) -> list[Text]:
    """One line: how many records the data checks read of each list's ``total``."""
    from rich.text import Text

    checked = (report.get("observations") or {}).get("data_checked")
    if not isinstance(checked, dict) or not checked:
        return []
    parts = []
    every = True
    for name, cov in checked.items():
        if not isinstance(cov, dict):
            continue
        total = cov.get("total")
        parts.append(f"{cov.get('checked')} of {total if total is not None else '?'} {name}")
        every = every and cov.get("mode") == "all" and not cov.get("stopped")
    how = "every page" if every else "page 1 of each list; --data all reads every record"
    return [Text(f"data checked: {', '.join(parts)} ({how})")]


def _category_table(report: dict[str, Any]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    title = f"pmtk check: {escape(target_label(report.get('target')))}"
    if report.get("scope"):
        title += f" (only {', '.join(report['scope'])})"
    table = Table(title=title)
    table.add_column("Category")
    table.add_column("Passed", justify="right", style="green")
    table.add_column("Failed", justify="right", style="red")
    table.add_column("Skipped", justify="right", style="dim")
    table.add_column("Observed", justify="right", style="yellow")
    for category, n in report["summary"]["by_category"].items():
        table.add_row(
            category,
            str(n["passed"]),
            str(n["failed"]),
            str(n["skipped"]),
            str(n.get("observed", 0)),
        )
    return table


def _failure_lines(report: dict[str, Any]) -> list[Text]:
    """One line per failed check: its id and the first problem of its message."""
    from rich.text import Text

    lines = []
    for c in report["checks"]:
        if c["status"] == "failed":
            line = Text("FAILED ", style="bold red")
            line.append(f"{c['id']}: ", style="bold")
            line.append(" ".join(failure_reason(str(c.get("message", ""))).split()))
            lines.append(line)
    return lines


def _observed_lines(report: dict[str, Any], limit: int | None) -> list[Text]:
    """The observations, one whole line each: the first ``limit`` and how many more
    there are (a terminal), or every one (``None``: a pipe or a log, where grep reads them)."""
    from rich.text import Text

    observed = [o for c in report["checks"] for o in c.get("observed", [])]
    shown = observed if limit is None else observed[:limit]
    # One observation, one whole line (never cut mid-token): grep finds it in a log.
    lines = [Text(" ".join(f"observed: {_observed_line(o)}".split())) for o in shown]
    if len(observed) > len(shown):
        more = len(observed) - len(shown)
        lines.append(Text(f"observed: ... and {more} more in report.json / report.html"))
    return lines


def _baseline_lines(report: dict[str, Any]) -> list[Text]:
    from rich.text import Text

    b = report.get("baseline")
    if not b:
        return []
    return [
        Text(
            f"against baseline: {len(b['new'])} new finding(s) {', '.join(b['new'])}; "
            f"{len(b['fixed'])} fixed {', '.join(b['fixed'])}"
        )
    ]


def target_label(target: Any) -> str:
    """How the console names a report's target (format 2 object or format 1 string)."""
    if isinstance(target, dict):
        url = str(target.get("base_url", "?"))
        return f"the embedded mock at {url}" if target.get("embedded_mock") else url
    return str(target)


def failure_reason(message: str) -> str:
    r"""One console line for a failed check: its first problem, and how many more there are.

    Examples
    --------
    >>> failure_reason("a is wrong\nb is wrong\n... and 3 more")
    'a is wrong (+4 more in report.html)'
    """
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    first = lines[0]
    if len(first) > MAX_REASON_CHARS:
        first = first[: MAX_REASON_CHARS - 3] + "..."
    more = len(lines) - 1
    last = lines[-1]
    count = last.removeprefix("... and ").removesuffix(" more")
    if last.startswith("... and ") and count.isdigit():
        # Recorder.message() shows 20 problems and ends with "... and N more".
        more += int(count) - 1
    return f"{first} (+{more} more in report.html)" if more > 0 else first
