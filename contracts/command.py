"""``pmtk check``: run the contract suite (``contracts/``) in-process and summarise it.

Exit codes (every path, see docs/contracts.md):

* **0** conformant: the run went to its end and no check failed;
* **1** findings: the run went to its end and at least one check failed;
* **2** not checked: a bad option (found before any request), the deployment
  unreachable, no token endpoint at the address, credentials refused, the reports
  not writable, or the suite could not run;
* **130** interrupted (Ctrl-C): no report is written and earlier reports are left
  untouched.

Output: progress, notices and errors go to stderr; the result (summary table, each
failed check with its reason, the verdict) goes to stdout.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolkit._cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, is_plain
from toolkit._options import BaseUrl, ClientId, ClientSecret, UserAgent
from toolkit.config import DEFAULT_USER_AGENT as DEFAULT_UA
from toolkit.errors import ConfigurationError

if TYPE_CHECKING:
    import pytest
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from contracts.suite import Options

__all__ = ["VERDICTS", "ConsoleProgress", "check_command", "run_suite"]

SUITE_DIR = Path(__file__).parent

# The numbers are the one table of every pmtk command (toolkit._cli.EXIT_CODES, README
# "Exit codes"); check only names them and gives each the verdict word it prints.
EXIT_CONFORMANT = EXIT_OK
EXIT_FINDINGS = EXIT_FAILED
EXIT_NOT_CHECKED = EXIT_REFUSED
VERDICTS: dict[int, str] = {
    EXIT_CONFORMANT: "conformant",
    EXIT_FINDINGS: "findings",
    EXIT_NOT_CHECKED: "not checked",
    EXIT_INTERRUPTED: "interrupted",
}
"""Every exit code of ``pmtk check`` (numbers from ``toolkit._cli``) and its verdict word."""

ERROR_LOG = "pmtk-check-error.log"
"""Written into the report folder (redacted) only when the suite itself broke."""

PYTEST_ARGS: tuple[str, ...] = (
    "-c",
    str(SUITE_DIR / "pytest.ini"),
    "--rootdir",
    str(SUITE_DIR),
    "-p",
    "no:cacheprovider",
    # pmtk draws its own progress (ConsoleProgress): pytest's dots, percentages and
    # node ids are not for the user of `pmtk check`.
    "-p",
    "no:terminal",
    # sys-level capture: the checks' own output stays captured, while the progress
    # console (which holds the real stderr object) is never swallowed mid-check.
    "--capture=sys",
    "--pm-no-summary",
)
"""The only command-line words pytest gets: fixed ones. Settings travel in a Preset."""


class ConsoleProgress:
    """pytest plugin drawing ``pmtk check``'s progress on stderr with rich.

    One line per category when its last check ends (passed/failed/skipped counts and
    seconds), and, on a terminal, a transient live line naming the check in progress.
    Check ids are shown, never pytest node ids.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.left: dict[str, int] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.started: dict[str, float] = {}
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.check_id: str | None = None
        self.waited = 0.0
        """Seconds the run waited for the rate limit, as the session announced them."""
        self._unsubscribe: Callable[[], None] | None = None

    # -- pytest hooks ------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from rich.text import Text

        from contracts.suite import current_run

        run = current_run()
        if run is None:
            return
        if run.options.embedded_mock:
            line = Text("checking the embedded mock at ")
            line.append(run.target, style="bold")
            line.append(" (no --base-url or PM_BASE_URL given)")
        else:
            line = Text("checking ")
            line.append(run.target, style="bold")
        self.console.print(line)
        self._unsubscribe = run.session.subscribe(self.wait)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from contracts.suite import check_identity

        for item in session.items:
            category = check_identity(item)[1]
            self.left[category] = self.left.get(category, 0) + 1
        if self.console.is_terminal and session.items:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=self.console,
                transient=True,
                auto_refresh=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("starting", total=len(session.items))

    # Items, not node ids: schemathesis' generated checks share one node id.
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        from rich.markup import escape

        from contracts.suite import check_identity

        check_id, category = check_identity(item)
        self.check_id = check_id
        self.started.setdefault(category, time.monotonic())
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"checking {escape(check_id)}")
            self.progress.refresh()

    # -- the session's rate-limit waits ---------------------------------------------

    def wait(self, seconds: float, reason: str) -> None:
        """The session waits ``seconds`` for the rate limit: say so, as ``pmtk sync`` does.

        On a terminal the live line shows it beside the check that waits; elsewhere a
        wait of :data:`~toolkit.store.progress.NOTICE_MIN_WAIT` seconds or more is one
        whole line. The total is in the summary (``seconds_waited_for_rate_limit``).
        """
        from rich.markup import escape
        from rich.text import Text

        from toolkit.store.progress import NOTICE_MIN_WAIT
        from toolkit.throttle import wait_notice

        self.waited += seconds
        notice = wait_notice(seconds, reason)
        where = self.check_id or "the run"
        if self.progress is not None and self.task is not None:
            self.progress.update(
                self.task, description=f"checking {escape(where)}: {escape(notice)}"
            )
            self.progress.refresh()
        elif seconds >= NOTICE_MIN_WAIT:
            self.console.print(Text(f"  {where}: {notice}", style="yellow"))

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # By teardown the plugin in contracts/conftest.py has recorded the check's outcome.
        from contracts.suite import check_identity, current_run

        check_id, category = check_identity(item)
        if category not in self.left:
            return
        run = current_run()
        record = run.records.get(check_id) if run is not None else None
        status = record.status if record is not None else "failed"
        counts = self.counts.setdefault(category, {"passed": 0, "failed": 0, "skipped": 0})
        counts[status] = counts.get(status, 0) + 1
        self.left[category] -= 1
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)
            self.progress.refresh()
        if self.left[category] == 0:
            self._category_done(category, counts)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stop()

    # -- drawing -----------------------------------------------------------------

    def _category_done(self, category: str, counts: dict[str, int]) -> None:
        from rich.text import Text

        seconds = time.monotonic() - self.started.get(category, time.monotonic())
        style = "red" if counts["failed"] else "green" if counts["passed"] else "dim"
        line = Text(f"  {category:<15}", style=style)
        parts = [f"{n} {word}" for word, n in counts.items() if n]
        line.append(", ".join(parts))
        line.append(f"  ({seconds:.1f} s)", style="dim")
        self.console.print(line)

    def stop(self) -> None:
        """Remove the live line (also after Ctrl-C, so the cursor comes back)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def run_suite(options: Options, *, progress: ConsoleProgress | None = None) -> int:
    """Run pytest on the suite with ``options``; return pmtk's exit code (0, 1, 2 or 130).

    The options are handed over as a plugin object (:class:`contracts.suite.Preset`),
    never as argv words: a value beginning with ``-`` stays a value, and no secret
    can reach pytest's own messages. What pytest itself writes to stderr (its
    ``Exit:`` lines, an internal error's traceback) is captured, not shown: the
    outcome is read from :data:`contracts.suite.OUTCOME`.
    """
    import pytest

    from contracts.suite import OUTCOME, Preset, hypothesis_home

    OUTCOME.reset()
    plugins: list[object] = [Preset(options)]
    if progress is not None:
        plugins.append(progress)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), _hypothesis_home(hypothesis_home()):
            status = int(pytest.main([str(SUITE_DIR), *PYTEST_ARGS], plugins=plugins))
    finally:
        if progress is not None:
            progress.stop()
    if OUTCOME.interrupted:
        return EXIT_INTERRUPTED
    report = OUTCOME.report
    if report is not None and status in (0, 1):
        return EXIT_FINDINGS if report["summary"]["failed"] else EXIT_CONFORMANT
    if OUTCOME.reason is None:
        OUTCOME.reason = _internal_error(options, captured.getvalue(), status)
    return EXIT_NOT_CHECKED


@contextlib.contextmanager
def _hypothesis_home(home: Path) -> Iterator[None]:
    """Point Hypothesis' storage at ``home`` for the run, then restore what it was."""
    from hypothesis import configuration

    name = "__hypothesis_home_directory"  # a module global: no name mangling applies
    before = getattr(configuration, name, None)
    configuration.set_hypothesis_home_dir(home)
    try:
        yield
    finally:
        configuration.set_hypothesis_home_dir(before)


def _internal_error(options: Options, text: str, status: int) -> str:
    """The one line for a run that broke without saying why; details go to a log file."""
    from toolkit import redaction

    # The run registered its tokens already; the secret is registered in any case.
    redaction.register(options.client_secret or "", client_id=options.client_id)
    text = redaction.redact(text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # pytest's usage errors come first ("ERROR: ..."), a traceback's exception last.
    errors = [ln for ln in lines if ln.startswith("ERROR") or " error: " in ln]
    last = (errors or lines or [f"pytest exit status {status}"])[-1][:200]
    where = ""
    if text.strip():
        log = options.report_dir / ERROR_LOG
        with contextlib.suppress(OSError):
            log.write_text(text, encoding="utf-8")
            where = f"; details in {log}"
    return f"the contract suite could not run: {last}{where}"


# The options of `pmtk check`, one alias each, so that the command's signature reads
# as a list of names (the connection options are the shared ones of toolkit/_options.py).
AllowWritesOption = Annotated[
    bool, typer.Option("--allow-writes", help="Also run the write checks (creates records)")
]
ProbeRateLimitOption = Annotated[
    bool,
    typer.Option("--probe-rate-limit", help="Burst until the first 429 (spends the minute)"),
]
TokenProbeOption = Annotated[
    int,
    typer.Option("--token-probe-seconds", help="Wall-clock token probe: keep a token N s (0-7200)"),
]
ReportDirOption = Annotated[
    Path, typer.Option("--report-dir", help="Where report.json/junit.xml/report.html go")
]
BaselineOption = Annotated[
    Path | None,
    typer.Option("--baseline", help="Earlier report.json to compare (read before the run)"),
]
RequestBudgetOption = Annotated[
    int, typer.Option("--request-budget", help="Most budgeted requests in the run")
]
DataOption = Annotated[
    str,
    typer.Option(
        "--data",
        help="What the data checks read: 'sample' (page 1 of each list) or 'all' (every page "
        "of every listed type, at the API's pace; the request budget is raised as needed)",
    ),
]
TestControlsOption = Annotated[
    bool,
    typer.Option(
        "--test-controls",
        help="The target is a pmtk mock: use its /_test/ controls (clock, rate-limit reset). "
        "Without it no /_test/ request goes to anything but the embedded mock",
    ),
]
SchemaExamplesOption = Annotated[
    int, typer.Option("--schema-examples", help="Generated requests per GET operation")
]
CategoryOption = Annotated[
    list[str] | None,
    typer.Option(
        "--category",
        metavar="NAME",
        help="Run only this category's checks (repeatable; the report names the scope). "
        "An unknown name is refused with the list of categories",
    ),
]
OutputOption = Annotated[
    str,
    typer.Option(
        "--output", help="'text' (a table, plain lines on a pipe) or 'json' (report.json on stdout)"
    ),
]


def check_command(
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    user_agent: UserAgent = None,
    allow_writes: AllowWritesOption = False,
    probe_rate_limit: ProbeRateLimitOption = False,
    token_probe_seconds: TokenProbeOption = 0,
    report_dir: ReportDirOption = Path("pmtk-report"),
    baseline: BaselineOption = None,
    request_budget: RequestBudgetOption = 300,
    schema_examples: SchemaExamplesOption = 3,
    test_controls: TestControlsOption = False,
    data: DataOption = "sample",
    category: CategoryOption = None,
    output: OutputOption = "text",
) -> None:
    """Check a deployment (or the embedded mock) against the API contract.

    Exit 0 conformant, 1 findings, 2 not checked (bad option, unreachable, wrong
    address, refused credentials), 130 interrupted.
    """
    out, err = _consoles(output)
    try:
        code = _check(
            out,
            err,
            base_url=base_url,
            client_id=client_id,
            client_secret=client_secret,
            user_agent=user_agent,
            allow_writes=allow_writes,
            probe_rate_limit=probe_rate_limit,
            token_probe_seconds=token_probe_seconds,
            report_dir=report_dir,
            baseline=baseline,
            request_budget=request_budget,
            schema_examples=schema_examples,
            test_controls=test_controls,
            data=data,
            categories=tuple(category or ()),
            output=output,
        )
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
        _interrupted(err, report_dir)
    raise typer.Exit(code)


def _consoles(output: str) -> tuple[Console, Console]:
    """The stdout and stderr consoles, after refusing an unknown ``--output``."""
    import sys

    from toolkit._cli import make_console

    if output not in ("text", "json"):
        raise typer.BadParameter("must be 'text' or 'json'", param_hint="'--output'")
    out = make_console()  # plain full lines off a terminal: never cut, never wrapped
    # Bound to the stderr of now: run_suite captures what pytest writes to sys.stderr,
    # and the progress lines must not be captured with it.
    err = make_console(file=sys.stderr)
    return out, err


def _check(out: Console, err: Console, *, output: str = "text", **settings: Any) -> int:
    """Run the suite with ``settings`` and show its outcome; the exit code."""
    from contracts.suite import OUTCOME

    options = _checked_options(err, settings)
    if options is None:
        return EXIT_NOT_CHECKED
    started = time.monotonic()
    code = run_suite(options, progress=ConsoleProgress(err))
    elapsed = time.monotonic() - started
    if code == EXIT_INTERRUPTED:
        _interrupted(err, options.report_dir)
        return code
    if output == "json":
        if OUTCOME.report is not None and code in (EXIT_CONFORMANT, EXIT_FINDINGS):
            import json

            typer.echo(json.dumps(OUTCOME.report, ensure_ascii=False))  # = report.json
        else:
            _error(err, OUTCOME.reason or "the contract suite could not run")
        return code
    _show_report(out, err, options, code)
    verdict = VERDICTS[code]
    if options.categories and code in (EXIT_CONFORMANT, EXIT_FINDINGS):
        verdict += f" (only {', '.join(options.categories)} checked)"
    out.print(f"{verdict}; total time {elapsed:.1f} s", markup=False, highlight=False)
    return code


def _checked_options(err: Console, settings: dict[str, Any]) -> Options | None:
    """The suite's options from ``settings``; ``None`` once a configuration, credentials or
    option problem has been said on ``err`` (nothing is checked then)."""
    from contracts.suite import OptionError, Options, validate_options

    try:
        settings = _resolve_target(err, settings)
    except ConfigurationError as exc:
        _error(err, str(exc))
        return None
    options = Options(**settings)
    problem = _credentials_problem(options)
    if problem is None:
        try:
            validate_options(options)
        except OptionError as exc:
            problem = str(exc)
    if problem is not None:
        _error(err, problem)
        return None
    return options


def _show_report(out: Console, err: Console, options: Options, code: int) -> None:
    """The text summary of a run and where its reports are, or why there is none."""
    from contracts.report import MAX_OBSERVED_SHOWN, render_summary
    from contracts.suite import OUTCOME
    from toolkit._cli import emit

    if OUTCOME.report is not None and code in (EXIT_CONFORMANT, EXIT_FINDINGS):
        # A terminal shows the first observations; a pipe or a log gets every one, one
        # whole line each, as the README promises (grep finds them).
        plain = is_plain(out.file)
        emit(
            out,
            render_summary(OUTCOME.report, observed_limit=None if plain else MAX_OBSERVED_SHOWN),
        )
        out.print(
            f"reports in {options.report_dir}/ (report.json, junit.xml, report.html)",
            markup=False,
            highlight=False,
        )
    else:
        _error(err, OUTCOME.reason or "the contract suite could not run")


def _resolve_target(err: Console, settings: dict[str, Any]) -> dict[str, Any]:
    """The one configuration path of every entry point (:mod:`toolkit.config`).

    Options and ``PM_`` variables (typer reads them), then ``.env``. The embedded mock
    is checked only when nothing at all is configured: a near-miss variable name
    (``PM_BASEURL``) or credentials without an address are refused, and a base URL
    must end with ``/main``.
    """
    from rich.text import Text

    from toolkit.config import configured, resolve_settings

    if not configured(
        base_url=settings["base_url"],
        client_id=settings["client_id"],
        client_secret=settings["client_secret"],
    ):
        return settings
    resolved = resolve_settings(
        settings["base_url"],
        settings["client_id"],
        settings["client_secret"],
        user_agent=settings["user_agent"],
        warn=False,
    )
    agent = settings["user_agent"] or (
        None if resolved.user_agent == DEFAULT_UA else resolved.user_agent
    )
    if agent is None:
        err.print(
            Text(
                "pmtk check: warning: no user agent configured; set PM_USER_AGENT (or "
                "--user-agent) to '<vendor name> (<vendor email>)', as the API asks",
                style="yellow",
            )
        )
    return {
        **settings,
        "base_url": resolved.base_url,
        "client_id": resolved.client_id,
        "client_secret": resolved.client_secret.reveal(),
        "user_agent": agent,
    }


def _credentials_problem(options: Options) -> str | None:
    if options.base_url is None and (options.client_id or options.client_secret):
        return "--client-id/--client-secret need --base-url (or PM_BASE_URL)"
    if options.base_url is not None and not (options.client_id and options.client_secret):
        return (
            "checking a deployment needs --client-id and --client-secret "
            "(or PM_CLIENT_ID / PM_CLIENT_SECRET)"
        )
    return None


def _error(err: Console, message: str) -> None:
    from rich.text import Text

    from toolkit.redaction import redact

    err.print(Text(f"pmtk check: {redact(message)}", style="red"))


def _interrupted(err: Console, report_dir: Path) -> None:
    from rich.text import Text

    kept = (report_dir / "report.json").is_file()
    tail = (
        f"the previous reports in {report_dir}/ are untouched"
        if kept
        else f"nothing was written to {report_dir}/"
    )
    err.print(Text(f"pmtk check: interrupted (Ctrl-C); no report written, {tail}", style="red"))
