"""``pmtk check``: run the contract suite (``contracts/``) in-process and summarise it.

Exit codes: 0 conformant, 1 findings, 2 unreachable deployment or wrong arguments.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from contracts.suite import Options

__all__ = ["check_command", "run_suite"]

SUITE_DIR = Path(__file__).parent


PYTEST_ARGS: tuple[str, ...] = (
    "-c",
    str(SUITE_DIR / "pytest.ini"),
    "--rootdir",
    str(SUITE_DIR),
    "-q",
    "--no-header",
    "--tb=no",
    "-p",
    "no:cacheprovider",
    "--pm-no-summary",
)
"""The only command-line words pytest gets: fixed ones. Settings travel in a Preset."""


def run_suite(options: Options) -> int:
    """Run pytest on the suite with ``options``; map its exit status to 0, 1 or 2.

    The options are handed over as a plugin object (:class:`contracts.suite.Preset`),
    never as argv words: a value beginning with ``-`` stays a value, and no secret
    can reach pytest's own messages.
    """
    import pytest

    from contracts import suite

    suite.LAST_REPORT.clear()
    suite.EXIT_REASON.clear()
    status = int(pytest.main([str(SUITE_DIR), *PYTEST_ARGS], plugins=[suite.Preset(options)]))
    if status == 0:
        return 0
    if status == 1 and suite.LAST_REPORT:
        return 1
    return 2


def check_command(
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            envvar="PM_BASE_URL",
            help="Deployment base URL including /main. Without one, the embedded mock is checked.",
        ),
    ] = None,
    client_id: Annotated[
        str | None, typer.Option("--client-id", envvar="PM_CLIENT_ID", help="OAuth client id")
    ] = None,
    client_secret: Annotated[
        str | None,
        typer.Option(
            "--client-secret", envvar="PM_CLIENT_SECRET", help="OAuth client secret (redacted)"
        ),
    ] = None,
    user_agent: Annotated[
        str | None,
        typer.Option("--user-agent", envvar="PM_USER_AGENT", help="User-Agent: vendor (email)"),
    ] = None,
    allow_writes: Annotated[
        bool, typer.Option("--allow-writes", help="Also run the write checks (creates records)")
    ] = False,
    probe_rate_limit: Annotated[
        bool,
        typer.Option("--probe-rate-limit", help="Burst until the first 429 (spends the minute)"),
    ] = False,
    token_probe_seconds: Annotated[
        int,
        typer.Option(
            "--token-probe-seconds", min=0, help="Wall-clock token probe: keep a token N s"
        ),
    ] = 0,
    report_dir: Annotated[
        Path, typer.Option("--report-dir", help="Where report.json/junit.xml/report.html go")
    ] = Path("pmtk-report"),
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline", exists=True, dir_okay=False, help="Earlier report.json to compare"
        ),
    ] = None,
    request_budget: Annotated[
        int, typer.Option("--request-budget", min=1, help="Most budgeted requests in the run")
    ] = 300,
    schema_examples: Annotated[
        int, typer.Option("--schema-examples", min=1, help="Generated requests per GET operation")
    ] = 3,
) -> None:
    """Check a deployment (or the embedded mock) against the API contract."""
    from rich.console import Console
    from rich.text import Text

    from contracts import suite
    from contracts.report import render_summary
    from contracts.suite import Options

    console = Console()
    if base_url is None and (client_id or client_secret):
        console.print("[red]--client-id/--client-secret need --base-url (or PM_BASE_URL)[/]")
        raise typer.Exit(2)
    if base_url is not None and not (client_id and client_secret):
        console.print(
            "[red]checking a deployment needs --client-id and --client-secret "
            "(or PM_CLIENT_ID / PM_CLIENT_SECRET)[/]"
        )
        raise typer.Exit(2)
    started = time.monotonic()
    code = run_suite(
        Options(
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
            schema_examples=max(1, schema_examples),
        )
    )
    elapsed = time.monotonic() - started
    if suite.LAST_REPORT:
        console.print(render_summary(suite.LAST_REPORT[-1]))
        console.print(f"reports in {report_dir}/ (report.json, junit.xml, report.html)")
    if code == 2:
        reason = suite.EXIT_REASON[-1] if suite.EXIT_REASON else "the suite could not run"
        console.print(Text(f"pmtk check: {reason}", style="red"))
    verdict = {0: "conformant", 1: "findings", 2: "not checked"}[code]
    console.print(f"{verdict}; total time {elapsed:.1f} s")
    raise typer.Exit(code)
