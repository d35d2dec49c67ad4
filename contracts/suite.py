"""Run-wide state of the contract suite and the helpers its checks share.

One :class:`Run` exists per pytest session (the plugin in ``contracts/conftest.py``
creates it). It owns the HTTP :class:`~contracts.session.Session`, the options,
the check records, the observations and the sample of data the rule checks walk.
The checks themselves live in ``contracts/test_*.py`` and record problems on a
:class:`Recorder`; the plugin turns those into pass/fail/skip records with evidence.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.report import CheckRecord, probe_report_dir, public_url, read_baseline
from contracts.session import CascadeGuard, Exchange, Session
from contracts.walker import Problem, Seen, walk_resource
from toolkit import catalogue as cat

__all__ = [
    "FINAL_PHASE",
    "LIMITS",
    "MAX_EVIDENCE",
    "OUTCOME",
    "PROBE_PHASE",
    "RUN_ORDER",
    "OptionError",
    "Options",
    "Outcome",
    "Preset",
    "Recorder",
    "Run",
    "Sample",
    "check_identity",
    "current_run",
    "validate_options",
]

MAX_EVIDENCE = 5

DATA_MODES = ("sample", "all")
"""Values of ``--data``: what the rule checks walk."""

MAX_429_RETRIES = 5
"""A data walk page answered 429 is asked again at most this often (each after the
``retry-after`` wait); then the walk of that type stops and says so."""

MAX_VIOLATIONS_LISTED = 10_000
"""Spec violations listed (with their record ids) in the report's ``data_checked``."""

PROBE_PHASE = "rate-limit-probe"
"""The run phase of ``rate-limit.probe`` (a ``rate-limit`` check): it spends the whole
window, so it runs after everything else."""
FINAL_PHASE = "final"
"""The run phase of the root-cause checks that judge the whole log (every 5xx, every
token request): after everything else, the probes included."""


def _run_order(categories: tuple[str, ...]) -> tuple[str, ...]:
    """The order checks run in, from the report order of the categories.

    Auth goes first (nothing works without a token), then the read-only data checks
    on the shared sample, paging's walks before schemathesis's generated requests (so
    under a tight ``--request-budget`` the walks are the ones that run); then the
    writes; then the checks that read or move the deployment's state: ``rate-limit``
    judges the headers of every exchange so far, ``token-lifetime`` advances the mock's
    virtual clock, and the burst probe, which spends the whole window, comes last.
    """
    late = ("write", "rate-limit", "token-lifetime")
    data = [c for c in categories if c != "auth" and c not in late]
    data.sort(key=lambda c: c == "schema")  # stable: only moves schema behind paging
    return ("auth", *data, *late, PROBE_PHASE, FINAL_PHASE)


RUN_ORDER: tuple[str, ...] = _run_order(cat.CONTRACT_CATEGORIES)
"""Category (or phase) order of the checks in a run; see :func:`_run_order`."""
LIMITS: dict[str, tuple[int, int, str]] = {
    "request_budget": (1, 100_000, "--request-budget"),
    "schema_examples": (1, 1_000, "--schema-examples"),
    # The service states 3600 s and the docs 900 s: two hours tells them apart with room.
    "token_probe_seconds": (0, 7_200, "--token-probe-seconds"),
}
"""Allowed range (inclusive) and flag of each numeric option."""


@dataclass
class Options:
    """Everything the user chose, resolved from flags and environment."""

    base_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    user_agent: str | None = None
    allow_writes: bool = False
    probe_rate_limit: bool = False
    token_probe_seconds: int = 0
    report_dir: Path = Path("pmtk-report")
    baseline: Path | None = None
    request_budget: int = 300
    schema_examples: int = 3
    reads_per_resource: int = 2
    baseline_report: dict[str, Any] | None = field(default=None, repr=False)
    """The ``--baseline`` report, read and checked before the run (see validate_options)."""
    embedded_mock: bool = False
    """True when no base URL was given and the suite checks the mock it started itself."""
    data: str = "sample"
    """``--data``: ``sample`` (page 1 of each list and a few reads) or ``all`` (every page
    of every listed type, the request budget raised by the pages the walk needs)."""
    test_controls: bool = False
    """``--test-controls``: the target is a mock whose ``/_test/`` controls may be used.
    Without it, no request under ``/_test/`` is sent to anything but the embedded mock."""
    categories: tuple[str, ...] = ()
    """``--category`` (repeatable): run only the checks of these categories; empty for all.
    The report names them (``scope``), so a partial run never reads as a whole one."""


class OptionError(ValueError):
    """A local option is unusable; the message is one line naming the option and the fault."""


def validate_options(options: Options) -> None:
    """Check every local option before the first request; read the baseline.

    Numeric options must be in range (:data:`LIMITS`), the baseline must be a pmtk
    ``report.json`` (it is parsed here and kept in ``options.baseline_report``, so a
    new report written over the same file later changes nothing), and the report
    folder must be creatable and writable (it is created here).

    Raises
    ------
    OptionError
        The first problem found, as one line.
    """
    from contracts.report import BaselineError, ReportDirError

    for name, (low, high, flag) in LIMITS.items():
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise OptionError(f"{flag} {value!r}: must be a whole number from {low} to {high}")
    if options.data not in DATA_MODES:
        raise OptionError(f"--data {options.data!r}: must be one of {', '.join(DATA_MODES)}")
    from contracts.report import CATEGORIES

    for category in options.categories:
        if category not in CATEGORIES:
            known = ", ".join(CATEGORIES)
            raise OptionError(f"--category {category!r}: must be one of {known}")
    if options.baseline is not None:
        try:
            options.baseline_report = read_baseline(options.baseline)
        except BaselineError as exc:
            raise OptionError(str(exc)) from None
    try:
        probe_report_dir(options.report_dir)
    except ReportDirError as exc:
        raise OptionError(str(exc)) from None


@dataclass
class Outcome:
    """How the last run in this process ended (read by ``pmtk check`` after pytest returns)."""

    report: dict[str, Any] | None = None
    """The report written, or None (stopped early, interrupted, failed to write)."""
    reason: str | None = None
    """Why the run stopped before checking: one line, secrets removed."""
    interrupted: bool = False
    """Ctrl-C (KeyboardInterrupt) ended the run; no report was written."""
    redact: Any = None
    """The run's redaction function, for text captured from pytest (None before a run)."""

    def reset(self) -> None:
        self.report = None
        self.reason = None
        self.interrupted = False
        self.redact = None


OUTCOME = Outcome()


def check_identity(item: Any) -> tuple[str, str]:
    """(check id, category) of a collected check, from its ``pm_check`` marker.

    A parametrised check gets its parameter label in brackets:
    ``format.values[Organization]``.
    """
    mark = item.get_closest_marker("pm_check")
    if mark is None:
        return str(item.name), "schema"
    check_id, category = str(mark.args[0]), str(mark.args[1])
    label = str(item.name).partition("[")[2].rstrip("]")
    if label:
        check_id = f"{check_id}[{label}]"
    return check_id, category


class Preset:
    """A pytest plugin object carrying the run's :class:`Options` (``pmtk check``).

    ``pytest.main(args, plugins=[Preset(options)])``: the settings travel as an object,
    so no value (a secret beginning with ``-``, say) is ever parsed as a command-line
    word, and none appears in pytest's own messages.
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def __repr__(self) -> str:
        return "Preset(<pmtk contract options>)"


class Recorder:
    """Collects the problems and evidence of one check while it runs."""

    def __init__(self, check_id: str, category: str) -> None:
        self.check_id = check_id
        self.category = category
        self.problems: list[str] = []
        self.evidence: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.observed: dict[tuple[str, str], dict[str, Any]] = {}
        self._seen: set[int] = set()
        self._outside: tuple[str, cat.Source] | None = None
        self.guard: CascadeGuard | None = None
        """The run's cascade guard: a finding on exchanges another check's root cause
        spoiled is grouped under that cause instead of failing this check."""

    def outside_spec(self, resource: str) -> None:
        """Check ``resource``: when the spec does not list it (its list endpoint comes
        from the facts or from pmtk), every finding is an observation, never a failure."""
        source = cat.endpoint_source(resource, "list")
        if source is not None and source != "spec":
            self._outside = (resource, source)

    def attach(self, *exchanges: Exchange | None) -> None:
        for ex in exchanges:
            if ex is None or ex.seq in self._seen or len(self.evidence) >= MAX_EVIDENCE:
                continue
            self._seen.add(ex.seq)
            self.evidence.append(ex.evidence())

    def fail(self, message: str, *exchanges: Exchange | None, cause: str | None = None) -> None:
        """Record a finding; the check fails at its end, after every problem is collected.

        A finding whose every exchange one root cause spoiled, or whose ``cause`` the
        check names (a root-cause check id), is grouped under that root instead (the
        cascade guard; given back to this check at the end if the root does not fail).
        For a resource outside the spec (:meth:`outside_spec`) the finding is an
        observation of the rule ``outside-spec`` instead.
        """
        guard = self.guard
        root = None
        if guard is not None:
            root = cause if cause is not None and guard.runs(cause) else guard.root_of(exchanges)
        if root is not None and root != self.check_id and guard is not None:
            shown = [ex.evidence() for ex in exchanges if ex is not None][:MAX_EVIDENCE]
            guard.group(root, self.check_id, self.category, message, shown)
            self.note(f"a follow-on of {root} (reported there): {message}")
            return
        if self._outside is not None:
            resource, source = self._outside
            self.observe(resource, message, rule="outside-spec", source=source)
            return
        self.problems.append(message)
        self.attach(*exchanges)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def observe(self, field: str, message: str, *, rule: str, source: str, count: int = 1) -> None:
        """Record an observation-level finding: reported once per (field, rule), never failing.

        ``count`` adds to the number of records (or values) it was seen in; ``message``
        of the first sighting is kept as the example.
        """
        key = (field, rule)
        entry = self.observed.get(key)
        if entry is None:
            entry = {"field": field, "rule": rule, "source": source, "count": 0, "example": message}
            self.observed[key] = entry
        entry["count"] += count

    def observed_list(self) -> list[dict[str, Any]]:
        return [self.observed[k] for k in sorted(self.observed)]

    def message(self) -> str:
        shown = self.problems[:20]
        more = len(self.problems) - len(shown)
        text = "\n".join(shown)
        if more > 0:
            text += f"\n... and {more} more"
        return text


@dataclass
class Sample:
    """What the rule checks walk: list pages and reads per resource."""

    bundles: dict[str, Exchange] = field(default_factory=dict)
    reads: dict[str, list[Exchange]] = field(default_factory=lambda: defaultdict(list))
    problems: dict[str, list[tuple[Problem, Exchange]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    seen: Seen = field(default_factory=Seen)
    errors: dict[str, Exchange] = field(default_factory=dict)
    coverage: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per resource: ``checked`` records of ``total`` over ``pages`` list pages, and why a
    ``--data all`` walk stopped early (``stopped``), if it did."""

    def coverage_note(self, resource: str) -> str:
        """``checked 100 of 166 Referral records (page 1 of 2; --data all checks every one)``."""
        cov = self.coverage.get(resource)
        if cov is None:
            return f"no {resource} records were checked"
        total = cov["total"] if cov["total"] is not None else "an unknown number (no total)"
        text = f"checked {cov['checked']} of {total} {resource} records"
        if cov["mode"] == "all":
            text += f" (every page: {cov['pages']})"
        else:
            text += " (page 1 only; --data all checks every record)"
        if cov.get("stopped"):
            text += f"; the walk stopped early: {cov['stopped']}"
        return text


class Run:
    """State of one contract run."""

    def __init__(self, options: Options, session: Session, target: str) -> None:
        self.options = options
        self.session = session
        self.target = public_url(target)
        self.started = dt.datetime.now(dt.UTC)
        self.records: dict[str, CheckRecord] = {}
        self.observations: dict[str, Any] = {}
        self.scratch: dict[str, Any] = {}
        """State checks hand on to later checks that is not reported (the writes made)."""
        self._sample: Sample | None = None

    def target_info(self) -> dict[str, Any]:
        """The report's ``target``: the base URL without secrets, and whether it is the mock."""
        return {"base_url": self.target, "embedded_mock": self.options.embedded_mock}

    def scope(self) -> list[str] | None:
        """The report's ``scope``: the categories run (``--category``), or None for all."""
        return list(self.options.categories) or None

    # ------------------------------------------------------------------ data sample

    def sample(self) -> Sample:
        """List page 1 (``_count`` = max) of every listed resource, then a few reads; walk all."""
        if self._sample is not None:
            return self._sample
        # Kept only once complete: a sample cut short (request budget spent) would give
        # the next checks a KeyError instead of the budget skip they should get.
        sample = Sample()
        read_kinds = {e.resource for e in cat.ENDPOINTS if e.kind == "read"}
        for name in cat.LISTED_RESOURCES:
            ex = self.session.get(
                f"/{name}", params={"_count": cat.MAX_PAGE_SIZE}, operation=f"GET /main/{name}"
            )
            if ex.status != 200 or not isinstance(ex.json, dict):
                sample.errors[name] = ex
                continue
            sample.bundles[name] = ex
            resources = entries(ex.json)
            for item in resources:
                self._walk(sample, name, item, ex)
            total = ex.json.get("total")
            coverage: dict[str, Any] = {
                "mode": self.options.data,
                "checked": len(resources),
                "total": total if isinstance(total, int) and not isinstance(total, bool) else None,
                "pages": 1,
            }
            sample.coverage[name] = coverage
            if self.options.data == "all":
                self._walk_rest(sample, name, ex, coverage)
            if name not in read_kinds:
                continue
            for item in resources[: self.options.reads_per_resource]:
                rid = item.get("id") if isinstance(item, dict) else None
                if not isinstance(rid, str):
                    continue
                read = self.session.get(f"/{name}/{rid}", operation=f"GET /main/{name}/{{id}}")
                sample.reads[name].append(read)
                if read.status == 200 and isinstance(read.json, dict):
                    self._walk(sample, name, read.json, read)
        self._sample = sample
        self.observations["data_checked"] = _data_checked(sample)
        return sample

    def _walk_rest(
        self, sample: Sample, name: str, first: Exchange, coverage: dict[str, Any]
    ) -> None:
        """``--data all``: follow ``next`` from page 1 to the end, walking every record.

        The request budget is raised by the pages the walk needs (known from
        ``Bundle.total``; one at a time without it), so the other checks keep theirs.
        The session paces on ``x-ratelimit-remaining``; a 429 is waited out
        (``retry-after``) and asked again. A next link off the origin, back to a page
        already read, or past what ``total`` allows ends the walk: the paging checks
        report those.
        """
        from contracts.session import ForeignOrigin
        from toolkit.page import next_link

        total = coverage["total"]
        count = max(1, len(entries(first.json)))
        allowed = math.ceil(total / count) + 3 if total is not None else 100_000
        if total is not None:
            self._raise_budget(max(0, math.ceil(total / count) - 1))
        visited = {first.url}
        page = first
        while (link := next_link(page.json)) is not None:
            url = self.session.url(link)
            try:
                self.session.check_origin(url)
            except ForeignOrigin:
                coverage["stopped"] = f"page {coverage['pages']}'s next link leaves the origin"
                return
            if url in visited or coverage["pages"] >= allowed:
                coverage["stopped"] = f"page {coverage['pages']}'s next link loops or never ends"
                return
            visited.add(url)
            if total is None:
                self._raise_budget(1)
            page = self._get_waiting(url, name)
            if page.status != 200 or not isinstance(page.json, dict):
                coverage["stopped"] = f"page {coverage['pages'] + 1} answered {page.status}"
                return
            coverage["pages"] += 1
            for item in entries(page.json):
                coverage["checked"] += 1
                self._walk(sample, name, item, page)

    def _raise_budget(self, requests: int) -> None:
        self.session.budget += requests
        raised = self.observations.setdefault("data_all_budget_raised_by", 0)
        self.observations["data_all_budget_raised_by"] = raised + requests

    def _get_waiting(self, url: str, name: str) -> Exchange:
        """GET a page; a 429 is waited out (its ``retry-after``, at most a window) and retried."""
        ex = self.session.get(url, operation=f"GET /main/{name}")
        for _ in range(MAX_429_RETRIES):
            if ex.status != 429:
                break
            wait = _retry_after(ex)
            self.session.wait(wait)
            self.session.new_epoch()
            self._raise_budget(1)
            ex = self.session.get(url, operation=f"GET /main/{name}")
        return ex

    @staticmethod
    def _walk(sample: Sample, name: str, item: Any, ex: Exchange) -> None:
        for problem in walk_resource(name, item, sample.seen):
            sample.problems[name].append((problem, ex))

    # ------------------------------------------------------------------ observations

    def finish_observations(self) -> dict[str, Any]:
        """Derive the report's observations from the log and the walk."""
        obs = self.observations
        log = self.session.log
        status_codes: dict[str, Counter[str]] = defaultdict(Counter)
        error_shapes: dict[str, Counter[str]] = defaultdict(Counter)
        for ex in log:
            if "/_test/" in ex.url:
                continue
            status_codes[ex.operation][str(ex.status)] += 1
            if ex.status is not None and ex.status >= 400:
                error_shapes[str(ex.status)][_shape(ex)] += 1
        obs["status_codes"] = {k: dict(v) for k, v in sorted(status_codes.items())}
        obs["error_body_shape"] = {k: dict(v) for k, v in sorted(error_shapes.items())}
        if self._sample is not None:
            seen = self._sample.seen
            obs["reference_forms"] = seen.reference_forms()
            obs["forms"] = seen.form_report()
            obs["missing_everywhere"] = seen.missing_everywhere()
            obs["enum_values"] = seen.enum_report()
            obs["id_prefixes"] = {k: dict(v) for k, v in sorted(seen.id_prefixes.items())}
            shape = seen.shapes.get("Practitioner.name", Counter())
            obs["practitioner_name_shape"] = {
                "spec": "object",
                "facts": "array",
                "seen": dict(shape),
            }
            wrappers = Counter(_wrapper(ex) for ex in self._sample.bundles.values())
            obs.setdefault("collection_wrapper", {})["seen"] = dict(wrappers)
        obs["requests"] = {
            "budgeted": self.session.used,
            "budget": self.session.budget,
            "exempt": self.session.exempt_used,
            "seconds_waited_for_rate_limit": round(self.session.waited, 1),
        }
        return obs


def hypothesis_home() -> Path:
    """Where Hypothesis may keep its files during a run: pmtk's cache folder.

    ``$XDG_CACHE_HOME/pmtk/hypothesis``, else ``~/.cache/pmtk/hypothesis``. Hypothesis
    would otherwise create ``.hypothesis/`` in the user's working directory (its
    example database is off; its character-table and constants caches are not).
    """
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pmtk" / "hypothesis"


def _retry_after(ex: Exchange) -> float:
    """Seconds a 429 asks to wait (``retry-after``), within one rate-limit window."""
    value = ex.header(cat.RETRY_AFTER_HEADER)
    try:
        seconds = float(value) if value is not None else float(cat.RATE_LIMIT_WINDOW_SECONDS)
    except ValueError:
        seconds = float(cat.RATE_LIMIT_WINDOW_SECONDS)
    if not math.isfinite(seconds):
        seconds = float(cat.RATE_LIMIT_WINDOW_SECONDS)
    return min(max(seconds, 1.0), float(cat.RATE_LIMIT_WINDOW_SECONDS))


def _data_checked(sample: Sample) -> dict[str, Any]:
    """The report's ``data_checked``: per resource, records checked of ``total``, and every
    spec violation found with its record id (``Type/id path: message``)."""
    out: dict[str, Any] = {}
    listed = 0
    for name, cov in sample.coverage.items():
        violations = []
        for problem, _ex in sample.problems.get(name, []):
            if problem.source == "spec" and listed < MAX_VIOLATIONS_LISTED:
                violations.append(problem.text())
                listed += 1
        out[name] = {**cov, "violations": violations}
    return out


def entries(bundle: Any) -> list[Any]:
    """The resources of a Bundle's entries (empty when none)."""
    if not isinstance(bundle, dict):
        return []
    out = []
    for e in bundle.get("entry") or []:
        if isinstance(e, dict) and "resource" in e:
            out.append(e["resource"])
    return out


def _shape(ex: Exchange) -> str:
    if not ex.response_body:
        return "(empty)"
    data = ex.json
    if isinstance(data, dict):
        kind = data.get("resourceType")
        if kind == "OperationOutcome":
            issues = data.get("issue") or [{}]
            code = issues[0].get("code") if isinstance(issues[0], dict) else None
            return f"OperationOutcome({code})"
        return f"object keys {sorted(data)[:6]}"
    return "non-JSON" if data is None else type(data).__name__


def _wrapper(ex: Exchange) -> str:
    data = ex.json if isinstance(ex.json, dict) else {}
    return f"{data.get('resourceType')}/{data.get('type')} keys={sorted(data)}"


_CURRENT: list[Run] = []


def current_run() -> Run | None:
    """The Run of the pytest session in progress (None outside one)."""
    return _CURRENT[-1] if _CURRENT else None


def push_run(run: Run) -> None:
    _CURRENT.append(run)


def pop_run(run: Run) -> None:
    if run in _CURRENT:
        _CURRENT.remove(run)
