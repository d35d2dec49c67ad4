"""``pmtk sync``: pull every listed resource into a local Parquet store.

Heavy imports (polars, the client, the store) happen inside the command, so that
``pmtk --help`` stays cheap.

Exit codes (also in ``docs/store.md``):

====  =====================================================================
0     synced (or, with ``--verify``, every file matched its checksum)
1     the sync failed: API, network, credentials, or another sync holds the lock;
      or one or more resources failed (validation, an API error for that list)
      while the others were synced -- the summary table says which and why
2     refused, nothing written, nothing requested: an option or a ``--resource``
      name is invalid, the settings are incomplete, the folder is not a pmtk
      store, or its manifest is damaged
3     ``--verify`` found damaged or missing data files (each is listed)
4     writing failed locally: disk full, read-only or forbidden folder; the
      data stored before is unchanged
130   interrupted (Ctrl-C); run the same command again to resume

Every error is one line naming the resource, printed as plain text (a server's
``[security]`` stays visible). "Run the same command again to resume" is said
only when staged pages were kept and the cause may pass (network, 5xx, 429,
Ctrl-C); a refused secret says to check ``PM_CLIENT_ID``/``PM_CLIENT_SECRET``.
While the client waits for the rate limit or retries a request, the progress
bar says so (on a terminal), or one line per notice is written (otherwise).
====  =====================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit._options import BaseUrl, ClientId, ClientSecret, connection_settings

__all__ = [
    "EXIT_DAMAGED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WRITE_FAILED",
    "sync_command",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_DAMAGED = 3
EXIT_WRITE_FAILED = 4
EXIT_INTERRUPTED = 130


Out = Annotated[Path, typer.Option("--out", "-o", help="Store directory (created when missing).")]
Resources = Annotated[
    list[str] | None,
    typer.Option(
        "--resource",
        "-r",
        help="Resource type to sync; repeat for several. Default: every listed resource.",
    ),
]
Full = Annotated[
    bool, typer.Option("--full", help="Re-fetch everything instead of only what changed.")
]
Errors = Annotated[
    str,
    typer.Option(
        "--errors",
        help="On a schema failure: 'raise' (store nothing for that resource) or 'warn'.",
    ),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bars and no summary table.")
]
Reconcile = Annotated[
    bool,
    typer.Option(
        "--reconcile",
        help="Also walk each resource's whole list and drop stored records the deployment "
        "no longer has (one request per 100 records; Patient deletions need no walk).",
    ),
]
Verify = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Check every stored file against its recorded sha256 instead of syncing "
        "(exit 3 and the damaged files listed when any fails).",
    ),
]
Rebuild = Annotated[
    bool,
    typer.Option(
        "--rebuild",
        help="Rebuild every table from the raw records kept in the store; no request is sent.",
    ),
]
Views = Annotated[
    list[Path] | None,
    typer.Option(
        "--view",
        help="A SQL-on-FHIR ViewDefinition (JSON file) to materialise from the raw records "
        "as views/<name>.parquet after the sync; repeat for several.",
    ),
]


def sync_command(
    out: Out = Path("pmtk-store"),
    resource: Resources = None,
    full: Full = False,
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    errors: Errors = "raise",
    quiet: Quiet = False,
    verify: Verify = False,
    reconcile: Reconcile = False,
    rebuild: Rebuild = False,
    view: Views = None,
) -> None:
    """Sync resources into a Parquet store; an interrupted run resumes where it stopped."""
    from rich.console import Console

    from toolkit.store import SyncProgress

    # Every argument problem is a usage error (exit 2), found before any request.
    if errors not in ("raise", "warn"):
        raise typer.BadParameter("must be 'raise' or 'warn'", param_hint="'--errors'")
    wanted = _resources(resource)
    err = Console(stderr=True, soft_wrap=True, highlight=False)  # soft_wrap: one error, one line
    _check_views(err, view or [])

    if verify:
        _verify(out, wanted, quiet=quiet)
        return
    _check_target(err, out)  # before connecting: a refusal writes nothing and costs nothing
    if rebuild:
        client, wanted = _raw_source(err, out, wanted)
    else:
        client = _connect(err, base_url, client_id, client_secret)
    display = SyncProgress("off" if quiet else "bars" if err.is_terminal else "lines", console=err)
    options = {"full": full or rebuild, "errors": errors, "reconcile": reconcile and not rebuild}
    summary = _run(err, display, client, out, wanted, options, quiet=quiet)
    _print_repaired(err, summary)
    if not quiet:
        Console(soft_wrap=True).print(summary.table())
    if view:
        _write_views(err, out, view, quiet=quiet)


def _check_views(err: Any, files: list[Path]) -> None:
    """Every --view file read and checked before anything is sent or written (exit 2)."""
    from toolkit.errors import PmtkError
    from toolkit.viewdefs import load_view

    for path in files:
        try:
            load_view(path)
        except PmtkError as exc:
            raise _fail(
                err, "refused", None, exc, EXIT_REFUSED, f"fix the view in {path}"
            ) from None


def _raw_source(err: Any, out: Path, wanted: list[str]) -> tuple[Any, list[str]]:
    """The store's raw records as the page source of a rebuild, and the resources to rebuild."""
    from toolkit.errors import PmtkError
    from toolkit.store.layout import read_manifest
    from toolkit.store.raw import RawPageSource

    try:
        stored = sorted(read_manifest(out)["resources"])
    except PmtkError as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    if not stored:
        empty = ValueError(f"the store at {out} holds nothing to rebuild")
        raise _fail(err, "refused", None, empty, EXIT_REFUSED, "run `pmtk sync` first")
    return RawPageSource(out), wanted or stored


def _write_views(err: Any, out: Path, files: list[Path], *, quiet: bool) -> None:
    from toolkit.errors import PmtkError
    from toolkit.store.raw import write_views

    try:
        written = write_views(out, list(files))
    except PmtkError as exc:
        raise _fail(err, "views failed", None, exc, EXIT_FAILED) from None
    if not quiet:
        for name, path in written.items():
            typer.echo(f"view {name}: {path}")


def _run(
    err: Any,
    display: Any,
    client: Any,
    out: Path,
    wanted: list[str],
    options: dict[str, Any],
    *,
    quiet: bool,
) -> Any:
    """The sync itself; each way it can fail becomes its message and exit code."""
    from toolkit.errors import ConfigurationError, PmtkError
    from toolkit.store import ManifestDamaged, NotAStore, StoreWriteError, SyncFailed, sync

    try:
        with client:
            return sync(client, out, resources=wanted or None, progress=display, **options)
    except KeyboardInterrupt:
        raise _interrupted(err, display, out) from None
    except SyncFailed as exc:
        raise _some_failed(err, exc, client, quiet=quiet) from None
    except (NotAStore, ManifestDamaged) as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise _fail(err, "sync failed", _where(display), exc, EXIT_WRITE_FAILED) from None
    except ConfigurationError as exc:
        raise _fail(err, "configuration error", _where(display), exc, EXIT_REFUSED) from None
    except PmtkError as exc:
        failed = display.failures[-1] if display.failures else None
        staged = failed.staged_pages if failed is not None else 0
        advice = _advice(exc, staged, client)
        raise _fail(err, "sync failed", _where(display), exc, EXIT_FAILED, advice) from None


def _check_target(err: Any, out: Path) -> None:
    """Refuse a folder that is not a store (or is damaged) before anything is sent."""
    from toolkit.errors import PmtkError
    from toolkit.store import ManifestDamaged, NotAStore, StoreWriteError, check_folder

    try:
        check_folder(out)
    except (NotAStore, ManifestDamaged) as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise _fail(err, "sync failed", None, exc, EXIT_WRITE_FAILED) from None
    except PmtkError as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None  # a newer store format


def _connect(
    err: Any, base_url: str | None, client_id: str | None, client_secret: str | None
) -> Any:
    """A client from the options, else the settings path (``PM_*``, ``.env``, the mock)."""
    import toolkit
    from toolkit.errors import ConfigurationError

    settings = connection_settings(base_url, client_id, client_secret)
    try:
        return toolkit.connect(**settings)
    except ConfigurationError as exc:
        fix = "set PM_BASE_URL, PM_CLIENT_ID and PM_CLIENT_SECRET (or the matching options)"
        raise _fail(err, "configuration error", None, exc, EXIT_REFUSED, fix) from None


def _interrupted(err: Any, display: Any, out: Path) -> typer.Exit:
    """Say what Ctrl-C left (stored data unchanged, staged pages kept): exit 130."""
    failed = display.failures[-1] if display.failures else None
    where = failed.resource if failed is not None else None
    again = (
        f"{failed.staged_pages} staged page(s) kept; run the same command again to resume"
        if failed is not None and failed.staged_pages
        else "run the same command again to start it over"
    )
    message = f"the data stored before in {out} is unchanged; {again}"
    err.print(_line("interrupted", where, message, style="bold yellow"))
    return typer.Exit(EXIT_INTERRUPTED)


def _some_failed(err: Any, exc: Any, client: Any, *, quiet: bool) -> typer.Exit:
    """One line per failed resource with advice, then the summary table: exit 1."""
    from rich.console import Console

    for failed in exc.summary.failed:
        cause = exc.errors.get(failed.resource)
        advice = _advice(cause, failed.staged_pages, client) if cause is not None else None
        err.print(_line("sync failed", failed.resource, failed.error or "", hint=advice))
    _print_repaired(err, exc.summary)
    if not quiet:
        Console(soft_wrap=True).print(exc.summary.table())
    return typer.Exit(EXIT_FAILED)


def _resources(names: list[str] | None) -> list[str]:
    """The ``--resource`` values, checked against the listed resources (usage error otherwise)."""
    import difflib

    from toolkit import catalogue

    known = list(catalogue.LISTED_RESOURCES)
    by_lower = {k.lower(): k for k in known}
    chosen: list[str] = []
    for name in names or []:
        if name not in known:
            close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
            guess = f"did you mean '{by_lower[close[0]]}'? " if close else ""
            msg = f"unknown resource '{name}'; {guess}choose from {', '.join(known)}"
            raise typer.BadParameter(msg, param_hint="'--resource' / '-r'")
        if name not in chosen:
            chosen.append(name)
    return chosen


def _line(
    label: str,
    resource: str | None,
    message: str,
    *,
    hint: str | None = None,
    style: str = "bold red",
) -> Any:
    """One line of text, never read as markup: ``label (resource): message. hint``."""
    from rich.text import Text

    text = Text(label, style=style)
    if resource:
        text.append(f" ({resource})")
    text.append(": ")
    body = " ".join(message.split())
    if hint:
        body = f"{body.rstrip('. ')}. {hint}"
    text.append(body)
    return text


def _fail(
    console: Any,
    label: str,
    resource: str | None,
    exc: BaseException,
    code: int,
    hint: str | None = None,
) -> typer.Exit:
    console.print(_line(label, resource, str(exc), hint=hint))
    return typer.Exit(code)


def _where(display: Any) -> str | None:
    """The resource that was being synced when the run stopped."""
    failures = getattr(display, "failures", None)
    return failures[-1].resource if failures else None


def _advice(exc: BaseException, staged_pages: int, client: Any) -> str | None:
    """What to do about ``exc``; "resume" only when staged pages wait and the cause may pass."""
    from toolkit.errors import (
        ApiError,
        AuthError,
        DataValidationError,
        IncompleteResult,
        RateLimited,
        ServerError,
        TransportError,
    )

    again = (
        f"{staged_pages} staged page(s) are kept: run the same command again to resume"
        if staged_pages
        else "run the same command again later"
    )
    if isinstance(exc, AuthError):
        if exc.status == 403:
            return (
                "the API key is not allowed to do this: check its permissions, and that "
                "PM_CLIENT_ID / PM_CLIENT_SECRET belong to the intended key"
            )
        return (
            "the credentials were refused: check PM_CLIENT_ID and PM_CLIENT_SECRET "
            "(or --client-id / --client-secret)"
        )
    if isinstance(exc, TransportError):
        base = getattr(client, "base_url", "the deployment")
        return f"cannot reach {base}: check PM_BASE_URL (or --base-url) and the network; {again}"
    if isinstance(exc, RateLimited):
        return f"the rate limit did not clear (another program using the same key?); {again}"
    if isinstance(exc, ServerError):
        return f"the server failed; {again}"
    if isinstance(exc, DataValidationError):
        return "nothing of it was stored; --errors warn stores such data anyway"
    if isinstance(exc, IncompleteResult):
        return (
            "nothing of it was stored; the deployment's paging is broken (`pmtk check` shows how)"
        )
    if isinstance(exc, ApiError):
        return "nothing of it was stored"
    return None


def _print_repaired(console: Any, summary: Any) -> None:
    from rich.text import Text

    for result in summary.resources:
        if result.repaired:
            line = Text("repaired", style="yellow")
            line.append(
                f": {result.resource} was re-fetched in full because "
                f"{', '.join(result.repaired)} failed verification"
            )
            console.print(line)


def _verify(out: Path, resources: list[str] | None, *, quiet: bool) -> None:
    """``pmtk sync --verify``: hash every stored file; list the damaged ones; exit 0 or 3."""
    from rich.console import Console
    from rich.text import Text

    from toolkit.errors import PmtkError
    from toolkit.store import ManifestDamaged, NotAStore, verify

    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        report = verify(out, resources or None)
    except (NotAStore, ManifestDamaged) as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    except PmtkError as exc:
        raise _fail(err, "verify failed", None, exc, EXIT_FAILED) from None
    for problem in report.problems:
        err.print(_line("damaged", None, problem.describe(out)))
    if not report.ok:
        err.print(
            Text(
                f"{len(report.problems)} of {len(report.files)} files in {out} failed verification"
            )
        )
        raise typer.Exit(EXIT_DAMAGED)
    if not quiet:
        Console(soft_wrap=True, highlight=False).print(
            Text(
                f"verified {len(report.files)} files ({report.bytes / 1e6:.1f} MB) in "
                f"{out}: all match their sha256 ({report.elapsed:.2f} s)"
            )
        )
