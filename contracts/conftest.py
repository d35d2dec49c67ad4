"""pytest plugin of the contract suite: options, the run fixture, check records, reports.

``uv run pytest contracts --pm-base-url URL --pm-client-id ID --pm-client-secret S``
checks a deployment; with no target at all it starts the embedded mock (with test
controls) and checks that. ``pmtk check`` runs this same suite in-process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
from collections.abc import Generator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from contracts.report import (
    CheckRecord,
    ReportDirError,
    build_report,
    public_url,
    render_summary,
    write_reports,
)
from contracts.session import (
    DEFAULT_USER_AGENT,
    BudgetExhausted,
    ForeignOrigin,
    Session,
    TokenRefused,
    Unreachable,
)
from contracts.suite import (
    MAX_EVIDENCE,
    OUTCOME,
    RUN_ORDER,
    OptionError,
    Options,
    Preset,
    Recorder,
    Run,
    check_identity,
    hypothesis_home,
    pop_run,
    push_run,
    validate_options,
)
from toolkit import catalogue as cat

if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    # `pytest contracts` too keeps Hypothesis' files out of the working directory
    # (`pmtk check` sets the same folder around its run, see contracts.command).
    from hypothesis import configuration as _hypothesis_configuration

    _hypothesis_configuration.set_hypothesis_home_dir(hypothesis_home())

RUN_KEY = pytest.StashKey[Run]()
MOCK_KEY = pytest.StashKey[AbstractContextManager[Any]]()
REPORT_KEY = pytest.StashKey[dict[str, Any]]()
RECORDER_KEY = pytest.StashKey[Recorder]()


class CheckFailed(AssertionError):
    """A check recorded at least one finding."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pmtk", "pmtk contract suite")
    group.addoption("--pm-base-url", help="Deployment base URL incl. /main (env PM_BASE_URL)")
    group.addoption("--pm-client-id", help="OAuth client id (env PM_CLIENT_ID)")
    group.addoption("--pm-client-secret", help="OAuth client secret (env PM_CLIENT_SECRET)")
    group.addoption("--pm-user-agent", help="User-Agent to send (env PM_USER_AGENT)")
    group.addoption("--allow-writes", action="store_true", help="Run the write checks")
    group.addoption("--probe-rate-limit", action="store_true", help="Burst until the first 429")
    group.addoption(
        "--token-probe-seconds", type=int, default=0, help="Wall-clock token lifetime probe"
    )
    group.addoption("--report-dir", default="pmtk-report", help="Where reports are written")
    group.addoption("--baseline", default=None, help="An earlier report.json to compare with")
    group.addoption("--request-budget", type=int, default=300, help="Max budgeted requests")
    group.addoption(
        "--schema-examples", type=int, default=3, help="Generated requests per GET operation"
    )
    group.addoption(
        "--data", default="sample", help="What the data checks read: 'sample' or 'all' pages"
    )
    group.addoption(
        "--test-controls", action="store_true", help="The target is a mock: use its /_test/"
    )
    group.addoption(
        "--category",
        action="append",
        default=[],
        help="Run only this category's checks (repeatable)",
    )
    group.addoption("--pm-no-summary", action="store_true", help=argparse.SUPPRESS)


def _usage(message: str) -> pytest.UsageError:
    OUTCOME.reason = message
    return pytest.UsageError(message)


def _stop(message: str, run: Run | None = None) -> None:
    if run is not None:
        message = run.session.redact(message)
    OUTCOME.reason = message
    pytest.exit(message, returncode=2)


def _options(config: pytest.Config) -> Options:
    # `pmtk check` hands its settings over as an object, never as argv words: a secret
    # starting with "-" would otherwise be parsed as an option (and echoed back).
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, Preset):
            return plugin.options

    def opt(name: str, env: str | None = None) -> Any:
        value = config.getoption(name)
        if value in (None, "") and env:
            value = os.environ.get(env) or None
        return value

    baseline = opt("--baseline")
    return Options(
        base_url=opt("--pm-base-url", "PM_BASE_URL"),
        client_id=opt("--pm-client-id", "PM_CLIENT_ID"),
        client_secret=opt("--pm-client-secret", "PM_CLIENT_SECRET"),
        user_agent=opt("--pm-user-agent", "PM_USER_AGENT"),
        allow_writes=bool(opt("--allow-writes")),
        probe_rate_limit=bool(opt("--probe-rate-limit")),
        token_probe_seconds=int(opt("--token-probe-seconds") or 0),
        report_dir=Path(opt("--report-dir")),
        baseline=Path(baseline) if baseline else None,
        request_budget=int(opt("--request-budget")),
        schema_examples=max(1, int(opt("--schema-examples"))),
        data=str(opt("--data")),
        test_controls=bool(opt("--test-controls")),
        categories=tuple(opt("--category") or ()),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pm_check(id, category): a contract check")
    OUTCOME.reset()
    options = _options(config)
    if options.base_url is None:
        if options.client_id or options.client_secret:
            raise _usage("--pm-client-id/--pm-client-secret need --pm-base-url")
    elif not options.client_id or not options.client_secret:
        raise _usage(
            "a target needs a client id and secret (--pm-client-id/--pm-client-secret "
            "or PM_CLIENT_ID/PM_CLIENT_SECRET)"
        )
    # Every local option is checked before the mock starts or a request is sent
    # (`pmtk check` has done so already; this covers `pytest contracts`).
    try:
        validate_options(options)
    except OptionError as exc:
        raise _usage(str(exc)) from None
    if options.base_url is None:
        try:
            from toolkit.mock import serve

            mock = serve(test_controls=True)
            deployment = mock.__enter__()
        except Exception as exc:
            raise _usage(
                f"no base URL given and the embedded mock could not start: {exc}"
            ) from None
        config.stash[MOCK_KEY] = mock
        options.embedded_mock = True
        options.base_url = deployment.base_url
        options.client_id = deployment.client_id
        options.client_secret = deployment.client_secret
    assert options.base_url is not None and options.client_id and options.client_secret
    session = Session(
        options.base_url,
        options.client_id,
        options.client_secret,
        user_agent=options.user_agent or DEFAULT_USER_AGENT,
        budget=options.request_budget,
    )
    run = Run(options, session, options.base_url)
    config.stash[RUN_KEY] = run
    OUTCOME.redact = session.redact
    push_run(run)


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.session.close()
        pop_run(run)
    mock = config.stash.get(MOCK_KEY, None)
    if mock is not None:
        mock.__exit__(None, None, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """Preflight, before the checks are even imported: is anyone there, is this the API?

    A wrong address or refused credentials would otherwise come back as dozens of
    conformance failures; here they stop the run with one line (exit 2). This runs as
    a collection hook rather than in ``pytest_sessionstart`` because pytest prints a
    ``pytest.exit`` from session start itself, on top of pmtk's own line.
    """
    run = session.config.stash.get(RUN_KEY, None)
    if run is None:
        return
    try:
        # /_test/ is the mock's, never a deployment's: probed only on the embedded mock or
        # when --test-controls says the target is a mock (a production service would log
        # an unauthenticated probe of a path it does not have).
        if run.options.embedded_mock or run.options.test_controls:
            run.session.may_probe_test_controls = True
            run.session.detect_test_controls()
        run.session.token()
    except Unreachable as exc:
        _stop(f"deployment unreachable: {exc}", run)
    except TokenRefused as exc:
        _stop(_token_refused(run, exc.exchange.status, exc.exchange.response_body), run)
    run.observations["test_controls"] = run.session.test_controls


def _token_refused(run: Run, status: int | None, body: str) -> str:
    """One line saying why no token came back, and what to do about it."""
    url = public_url(run.session.url("/oauth/token"))
    if status in (400, 401, 403):
        return (
            f"the client id/secret were refused by the token endpoint {url} (status {status}); "
            "check PM_CLIENT_ID / PM_CLIENT_SECRET (or --client-id / --client-secret)"
        )
    if status in (404, 405):
        return (
            f"no token endpoint at {url} (status {status}): the base URL {run.target} is "
            "probably wrong; it must be the regional API address ending in /main, "
            "for example https://au-api.halaxy.com/main"
        )
    excerpt = " ".join(body.split())[:120]
    return (
        f"the token endpoint {url} answered {status} without an access token "
        f"({excerpt or 'empty body'}); nothing was checked"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    # Only a real Ctrl-C: pytest routes pytest.exit() and "errors during collection"
    # (a KeyboardInterrupt subclass) through this hook too.
    if excinfo.type is KeyboardInterrupt:
        OUTCOME.interrupted = True


def _marker(item: pytest.Item) -> tuple[str, str]:
    return check_identity(item)


def _rank(item: pytest.Item) -> int:
    mark = item.get_closest_marker("pm_check")
    phase = mark.kwargs.get("phase") if mark else None
    category = phase or (mark.args[1] if mark else "schema")
    return RUN_ORDER.index(category) if category in RUN_ORDER else len(RUN_ORDER)


def _resource_of(item: pytest.Item) -> str | None:
    """The resource a check is parametrised with (``[Referral]``), if any."""
    callspec = getattr(item, "callspec", None)
    resource = callspec.params.get("resource") if callspec is not None else None
    return resource if isinstance(resource, str) else None


def _outside_spec(item: pytest.Item) -> bool:
    """Whether the check is parametrised with a resource whose list the spec lacks."""
    resource = _resource_of(item)
    return resource is not None and cat.endpoint_source(resource, "list") not in (None, "spec")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # --category: the other categories' checks are deselected, not skipped, so the
    # report lists only what ran (and names the scope) instead of a wall of skips.
    wanted = set(_options(config).categories)
    if wanted:
        dropped = [item for item in items if _marker(item)[1] not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if _marker(item)[1] in wanted]
    # The checks of resources outside the spec run last, so that a request budget goes
    # to the spec's checks first (walking every Slot page can cost hundreds of requests).
    items.sort(key=lambda item: (_outside_spec(item), _rank(item)))
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.session.cascade.active = {_marker(item)[0] for item in items}


@pytest.fixture(scope="session")
def pm(request: pytest.FixtureRequest) -> Run:
    """The run in progress: session, options, sample, observations."""
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.skip("no contract target configured")
    return run


@pytest.fixture
def check(request: pytest.FixtureRequest) -> Recorder:
    """The recorder of the check being run: ``check.fail(message, exchange)``."""
    return _recorder(request.node)


def _recorder(item: pytest.Item) -> Recorder:
    rec = item.stash.get(RECORDER_KEY, None)
    if rec is None:
        rec = Recorder(*_marker(item))
        run = item.config.stash.get(RUN_KEY, None)
        if run is not None:
            rec.guard = run.session.cascade
        resource = _resource_of(item)
        if resource is not None:
            rec.outside_spec(resource)
        item.stash[RECORDER_KEY] = rec
    return rec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    rec = _recorder(item)
    try:
        yield
    except BudgetExhausted as exc:
        if rec.problems:
            raise CheckFailed(rec.message()) from None
        pytest.skip(f"{exc}; raise --request-budget to run this check")
    except Unreachable as exc:
        raise CheckFailed(f"deployment stopped answering: {exc}") from None
    except TokenRefused as exc:
        # A new token is taken mid-run (a 401 on a live token, the lifetime kept): the
        # endpoint refusing it then is auth.tokens-issued's finding (the exchange is
        # marked); this check could not go on and says so, without a traceback.
        rec.fail(f"no new token mid-run: {exc}", exc.exchange)
        if not rec.problems:
            pytest.skip(f"cut short, no new token mid-run: {rec.notes[-1]}")
    except ForeignOrigin as exc:
        rec.fail(str(exc))
    if rec.problems:
        raise CheckFailed(rec.message())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None and not (
        report.when == "teardown" or (report.when == "setup" and report.passed)
    ):
        _record(run, _recorder(item), report)
    return report


def _record(run: Run, rec: Recorder, report: pytest.TestReport) -> None:
    status = "passed" if report.passed else "skipped" if report.skipped else "failed"
    if status == "skipped":
        longrepr = report.longrepr
        message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        message = message.removeprefix("Skipped: ")
    elif status == "failed":
        message = rec.message() if rec.problems else _failure_text(report)
    else:
        message = "; ".join(rec.notes)
    run.records[rec.check_id] = CheckRecord(
        id=rec.check_id,
        category=rec.category,
        status=status,
        message=run.session.redact(message),
        evidence=rec.evidence,
        observed=rec.observed_list(),
    )


def _failure_text(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(report.longrepr)[-2000:]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    # Only a run that went to its end gets a report: an interrupted, stopped or broken
    # one would read as a pass of the checks it never reached, and replace the last
    # complete report.
    if run is None or OUTCOME.interrupted or exitstatus not in _COMPLETE:
        return
    _group_follow_ons(run)
    finished = dt.datetime.now(dt.UTC)
    report = build_report(
        target=run.target_info(),
        scope=run.scope(),
        started=run.started.isoformat(timespec="seconds"),
        finished=finished.isoformat(timespec="seconds"),
        elapsed=(finished - run.started).total_seconds(),
        checks=list(run.records.values()),
        observations=run.finish_observations(),
        requests=run.session.used + run.session.exempt_used,
        baseline_path=run.options.baseline,
        baseline_data=run.options.baseline_report,
    )
    # Redacted as data, before any serialisation: every report file and the console
    # summary are rendered from this one dict.
    report = run.session.redact_data(report)
    try:
        write_reports(report, run.options.report_dir)
    except ReportDirError as exc:
        _stop(str(exc), run)
    session.config.stash[REPORT_KEY] = report
    OUTCOME.report = report


MAX_FOLLOW_ONS_SHOWN = 5


def _group_follow_ons(run: Run) -> None:
    """Show each root cause's follow-on failures under its own check (the cascade guard).

    Every follow-on is listed in ``observations.cascade``; the root check's message says
    how many there were and shows the first few, so the report names the one fault once.
    """
    guard = run.session.cascade
    failed = {rid for rid, record in run.records.items() if record.status == "failed"}
    _give_back(run, guard.ungrouped(failed))
    follow_ons = guard.follow_ons
    if not follow_ons:
        return
    run.observations["cascade"] = {root: list(items) for root, items in follow_ons.items()}
    for root, items in follow_ons.items():
        record = run.records.get(root)
        if record is None:
            continue
        lines = [f"{len(items)} follow-on failures in other checks, grouped here:"]
        lines += [
            f"  {f['check']} ({f['category']}): {f['message']}"
            for f in items[:MAX_FOLLOW_ONS_SHOWN]
        ]
        if len(items) > MAX_FOLLOW_ONS_SHOWN:
            more = len(items) - MAX_FOLLOW_ONS_SHOWN
            lines.append(f"  ... and {more} more (observations.cascade)")
        record.message = "\n".join([record.message, *lines]).strip()


def _give_back(run: Run, items: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Fail each follow-on in its own check: its root did not fail (it passed, was skipped
    or did not run), so grouping it there would hide it."""
    for item, evidence in items:
        record = run.records.get(item["check"])
        if record is None:
            continue
        message = run.session.redact(item["message"])
        if record.status != "failed":
            record.status, record.message = "failed", message
        else:
            record.message = f"{record.message}\n{message}"
        record.evidence.extend(evidence[: max(0, MAX_EVIDENCE - len(record.evidence))])


_COMPLETE = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    report = config.stash.get(REPORT_KEY, None)
    if report is None or config.getoption("--pm-no-summary"):
        return
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=120, force_terminal=False).print(render_summary(report))
    terminalreporter.write(buffer.getvalue())
    terminalreporter.write_line(f"reports written to {config.stash[RUN_KEY].options.report_dir}/")
