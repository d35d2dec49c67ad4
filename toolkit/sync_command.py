"""``pmtk sync``: pull every listed resource into a local Parquet store.

What ``pmtk --help`` need not load (the client, the store) is imported in the command.

Exit codes: the one table of every command (:mod:`toolkit._cli`, README "Exit
codes"): 0 synced (or, with ``--verify``, every file matched its checksum); 1 the
sync failed part-way (network, server, rate limit) or one or more resources failed
while the others were synced -- the summary says which and why; 2 refused, nothing
written (an option or a ``--resource`` name, the settings, refused credentials, an
address not reached before anything was fetched, a folder that is not a pmtk store
or whose manifest is damaged); 3 ``--verify`` found damaged or missing files; 4
writing failed locally (disk full, read-only or forbidden folder; the data stored
before is unchanged); 130 interrupted (Ctrl-C): run the same command again to resume.

Every error is one line naming the resource, printed as plain text (a server's
``[security]`` stays visible). "Run the same command again to resume" is said
only when staged pages were kept and the cause may pass (network, 5xx, 429,
Ctrl-C); a refused secret says to check ``PM_CLIENT_ID``/``PM_CLIENT_SECRET``.
While the client waits for the rate limit or retries a request, the progress
bar says so (on a terminal), or one line per notice is written (otherwise). A
first sync that fails before storing anything leaves no trace: the folder it
made (or the files it put in an empty one) are removed again.

Output: on a terminal, live bars and a summary table; on a pipe, in a file, or
with ``NO_COLOR``/``TERM=dumb``, plain lines never cut nor wrapped; with
``--output json``, the summary is one JSON document on stdout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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

import toolkit
from toolkit import catalogue
from toolkit._cli import (  # the one exit-code table of every command
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_WRITE_FAILED,
    emit,
    is_plain,
    make_console,
)
from toolkit.config import configured
from toolkit.errors import (
    ApiError,
    AuthError,
    ConfigurationError,
    DataValidationError,
    IncompleteResult,
    PmtkError,
    ProtocolError,
    RateLimited,
    RedirectRefused,
    ServerError,
    TransportError,
)
from toolkit.redaction import redact
from toolkit.viewdefs import load_view

Out = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Store directory (created when missing). Default: pmtk-store, or "
        "pmtk-store-mock for the embedded mock.",
        show_default=False,
    ),
]
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
Rebind = Annotated[
    bool,
    typer.Option(
        "--rebind",
        help="Make a store (or a lake's --deployment name) of another deployment this one's: "
        "discard its data and sync everything in full (without it, it is refused).",
    ),
]
Output = Annotated[
    str,
    typer.Option(
        "--output",
        help="'text' (a table, or plain lines on a pipe) or 'json' (one document on stdout).",
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
Deployment = Annotated[
    str | None,
    typer.Option(
        "--deployment",
        help="Sync into a Delta Lake of many deployments (--out a folder or an s3:// URL) "
        "under this short name; a new name is added for the configured deployment.",
    ),
]
FromStore = Annotated[
    Path | None,
    typer.Option(
        "--from-store",
        help="With --deployment: bring a Parquet store (checked against its sha256 first) "
        "into the lake as that deployment, then sync it incrementally.",
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
    out: Out = None,
    resource: Resources = None,
    full: Full = False,
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    errors: Errors = "raise",
    quiet: Quiet = False,
    verify: Verify = False,
    reconcile: Reconcile = False,
    rebind: Rebind = False,
    output: Output = "text",
    rebuild: Rebuild = False,
    view: Views = None,
    deployment: Deployment = None,
    from_store: FromStore = None,
) -> None:
    """Sync resources into a Parquet store, or a Delta Lake with --deployment."""
    from toolkit.lake.command import is_lake_target, lake_sync_command

    if is_lake_target(out_text := _raw_out(out), deployment):
        lake_sync_command(
            out=out_text,
            deployment=deployment,
            wanted=_resources(resource),
            settings=connection_settings(base_url, client_id, client_secret),
            full=full,
            reconcile=reconcile,
            errors=errors,
            quiet=quiet,
            output=output,
            verify=verify,
            refused_options=_lake_refused(rebuild=rebuild, view=view),
            from_store=from_store,
            rebind=rebind,
        )
        return
    connection = (base_url, client_id, client_secret)
    err, wanted, out = _store_arguments(
        out, resource, view, connection, errors=errors, output=output
    )
    if verify:
        _verify(out, wanted, quiet=quiet)
        return
    options = _sync_options(
        full=full, errors=errors, reconcile=reconcile, rebind=rebind, rebuild=rebuild
    )
    _sync_store(
        err, out, wanted, connection, options, view, quiet=quiet, output=output, rebuild=rebuild
    )


def _store_arguments(
    out: Path | None,
    resource: list[str] | None,
    view: list[Path] | None,
    connection: tuple[str | None, str | None, str | None],
    *,
    errors: str,
    output: str,
) -> tuple[Any, list[str], Path]:
    """The stderr console, the resources and the store of a store sync (default: the
    connection's store), after checking every argument: each problem is a usage error
    (exit 2), found before any request."""
    _check_choices(errors=errors, output=output)
    wanted = _resources(resource)
    err = make_console(stderr=True)  # one error, one line: never wrapped, never cut
    _check_views(err, view or [])
    if out is None:
        out = _default_out(err, *connection)
    return err, wanted, out


def _sync_store(
    err: Any,
    out: Path,
    wanted: list[str],
    connection: tuple[str | None, str | None, str | None],
    options: dict[str, Any],
    view: list[Path] | None,
    *,
    quiet: bool,
    output: str,
    rebuild: bool,
) -> None:
    """Sync into the store at ``out`` (``options``: :func:`_sync_options`), show what was
    done, then write the ``--view`` files; a new store nothing was staged into is removed."""
    fresh = _fresh(out)
    _check_target(err, out)  # before connecting: a refusal writes nothing and costs nothing
    client, wanted = _source(err, out, wanted, rebuild, connection)
    quiet_run = quiet or output == "json"
    display = _progress(err, quiet=quiet_run)
    with _forgotten_if_nothing_staged(out, fresh, display):
        summary = _run(err, display, client, out, wanted, options, quiet=quiet, output=output)
    _print_repaired(err, summary)
    _print_summary(summary, quiet=quiet, output=output, rebuild=rebuild)
    if view:
        _write_views(err, out, view, quiet=quiet_run)


def _lake_refused(*, rebuild: bool, view: list[Path] | None) -> list[str]:
    """The store-only options given to a lake sync (it refuses them by name)."""
    return [name for name, given in (("--rebuild", rebuild), ("--view", view)) if given]


def _source(
    err: Any,
    out: Path,
    wanted: list[str],
    rebuild: bool,
    connection: tuple[str | None, str | None, str | None],
) -> tuple[Any, list[str]]:
    """Where the records come from and which resources: with ``--rebuild`` the store's own
    raw pages, else the deployment (``connection``: base URL, client id and secret)."""
    if rebuild:
        return _raw_source(err, out, wanted)
    return _connect(err, *connection), wanted


def _sync_options(
    *, full: bool, errors: str, reconcile: bool, rebind: bool, rebuild: bool
) -> dict[str, Any]:
    """The options of the sync itself: ``--rebuild`` is a full run and never reconciles."""
    return {
        "full": full or rebuild,
        "errors": errors,
        "reconcile": reconcile and not rebuild,
        "rebind": rebind,
    }


def _raw_out(out: Path | None) -> str | None:
    """``--out`` as typed: a Path folds the ``//`` of ``s3://bucket`` into one slash."""
    if out is None:
        return None
    text = str(out)
    for scheme in ("s3:/", "s3a:/"):
        if text.startswith(scheme) and not text.startswith(scheme + "/"):
            return scheme + "/" + text[len(scheme) :]
    return text


@contextlib.contextmanager
def _forgotten_if_nothing_staged(out: Path, fresh: bool | None, display: Any) -> Iterator[None]:
    """On a failed exit, undo a first sync of a new store that staged no page."""
    try:
        yield
    except typer.Exit:
        staged = sum(f.staged_pages for f in display.failures)
        if fresh is not None and not staged:
            _forget_failed_first_sync(out, created=fresh)
        raise


def _check_choices(*, errors: str, output: str) -> None:
    """Refuse an ``--errors`` or ``--output`` value outside its choices (a usage error)."""
    if errors not in ("raise", "warn"):
        raise typer.BadParameter("must be 'raise' or 'warn'", param_hint="'--errors'")
    if output not in ("text", "json"):
        raise typer.BadParameter("must be 'text' or 'json'", param_hint="'--output'")


def _progress(err: Any, *, quiet: bool) -> Any:
    """The progress display on stderr: none, plain lines off a terminal, or bars."""
    import sys

    from toolkit.store import SyncProgress

    return SyncProgress(
        "off" if quiet else "lines" if is_plain(sys.stderr) else "bars", console=err
    )


def _print_summary(summary: Any, *, quiet: bool, output: str, rebuild: bool = False) -> None:
    """The summary on stdout: a table (plain lines off a terminal) or one JSON document.

    A ``--rebuild`` sent no request: its pages and records came from the store's raw
    records, and the summary says so instead of reporting them as fetched.
    """
    if output == "json":
        import json

        data = summary_json(summary)
        if rebuild:
            data["source"] = "raw records"
            data["pages_fetched"] = 0
        typer.echo(json.dumps(data, ensure_ascii=False))
    elif not quiet:
        table = summary.table()
        if rebuild:
            _as_rebuild(table, summary)
        emit(make_console(), table)


REBUILD_HEADERS = {"fetched": "read from raw", "pages": "raw pages"}
"""Summary columns of a ``--rebuild``: nothing was fetched, pages were read from the store."""


def _as_rebuild(table: Any, summary: Any) -> None:
    """Retitle the summary table of a rebuild: read from the raw records, 0 pages fetched."""
    from rich.text import Text

    for column in table.columns:
        header = column.header.plain if isinstance(column.header, Text) else column.header
        if header in REBUILD_HEADERS:
            column.header = REBUILD_HEADERS[header]
    table.title = Text(f"pmtk sync --rebuild -> {summary.out}")
    caption = table.caption.plain if isinstance(table.caption, Text) else str(table.caption)
    fetched = f"{summary.requests} requests ({summary.pages} pages) in {summary.elapsed:.1f} s"
    read = (
        f"{summary.requests} requests, 0 pages fetched: {summary.pages} pages read from "
        f"the raw records in {summary.elapsed:.1f} s"
    )
    table.caption = Text(caption.replace(fetched, read, 1))


def summary_json(summary: Any) -> dict[str, Any]:
    """What ``pmtk sync --output json`` prints: the run and one object per resource."""
    return {
        "out": str(summary.out),
        "requests": summary.requests,
        "pages": summary.pages,
        "elapsed_seconds": round(summary.elapsed, 3),
        "failed": [r.resource for r in summary.failed],
        "resources": [
            {
                "resource": r.resource,
                "mode": r.mode,
                "status": r.status,
                "resumed": r.resumed,
                "fetched": r.fetched,
                "rows": dict(r.rows),
                "deleted": r.deleted,
                "pages": r.pages,
                "requests": r.requests,
                "elapsed_seconds": round(r.elapsed, 3),
                "repaired": list(r.repaired),
                "error": r.error,
            }
            for r in summary.resources
        ],
    }


def _fresh(out: Path) -> bool | None:
    """Whether this is a first sync: ``True`` the folder is missing (we make it),
    ``False`` it exists and is empty, ``None`` it already holds something."""
    if not out.exists():
        return True
    try:
        return False if out.is_dir() and not any(out.iterdir()) else None
    except OSError:
        return None


_FIRST_SYNC_FILES = ("manifest.json", ".lock", ".staging")


def _forget_failed_first_sync(out: Path, *, created: bool) -> None:
    """Remove what a first sync that stored nothing left (and the folder it made).

    Only under the store's lock: a folder whose lock another process holds is that
    writer's (two syncs started together on a new folder both find it missing), and
    nothing of it is removed. Kept too when anything is worth keeping: a committed
    resource in the manifest (the caller keeps it when staged pages wait for a rerun
    to resume from them), or anything else that is not a first sync's.
    """
    from toolkit.store.layout import locked_if_free

    try:
        with locked_if_free(out) as alone:
            if alone and _nothing_committed(out):
                _remove_first_sync_files(out)
    except (PmtkError, OSError):
        return  # a cleanup that cannot run keeps what is there
    if created:
        with contextlib.suppress(OSError):
            out.rmdir()  # only once empty: never another writer's files


def _nothing_committed(out: Path) -> bool:
    """Whether ``out`` holds only what a first sync writes, and no committed resource."""
    import json

    try:
        names = {p.name for p in out.iterdir()}
        if not names <= set(_FIRST_SYNC_FILES):
            return False  # something else is there now: not ours to remove
        manifest = out / "manifest.json"
        if manifest.exists():
            entries = json.loads(manifest.read_text("utf-8")).get("resources") or {}
            if any(entry.get("tables") for entry in entries.values()):
                return False  # data was committed
    except (OSError, ValueError, AttributeError):
        return False
    return True


def _remove_first_sync_files(out: Path) -> None:
    """Remove the staging folder and the manifest (the lock file goes when released)."""
    from toolkit.store.layout import rmtree

    with contextlib.suppress(OSError):
        rmtree(out / ".staging")
        (out / "manifest.json").unlink(missing_ok=True)
        (out / ".lock").unlink(missing_ok=True)


def _check_views(err: Any, files: list[Path]) -> None:
    """Every --view file read and checked before anything is sent or written (exit 2)."""
    from toolkit.store.raw import view_name

    for path in files:
        try:
            view_name(path, load_view(path))
        except PmtkError as exc:
            raise _fail(
                err, "refused", None, exc, EXIT_REFUSED, f"fix the view in {path}"
            ) from None


def _raw_source(err: Any, out: Path, wanted: list[str]) -> tuple[Any, list[str]]:
    """The store's raw records as the page source of a rebuild, and the resources to rebuild."""
    from toolkit.store.layout import read_manifest
    from toolkit.store.raw import RawPageSource, check_rebuild

    try:
        stored = sorted(read_manifest(out)["resources"])
    except PmtkError as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    if not stored:
        empty = ValueError(f"the store at {out} holds nothing to rebuild")
        raise _fail(err, "refused", None, empty, EXIT_REFUSED, "run `pmtk sync` first")
    try:  # raw records that cannot rebuild every row: refused before anything is written
        check_rebuild(out, wanted or stored)
    except PmtkError as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    return RawPageSource(out), wanted or stored


def _write_views(err: Any, out: Path, files: list[Path], *, quiet: bool) -> None:
    from toolkit.store import StoreLinked
    from toolkit.store.raw import write_views

    try:
        written = write_views(out, list(files))
    except StoreLinked as exc:  # nothing written; the message begins with "refused:"
        err.print(_line("refused", None, str(exc).removeprefix("refused: ")))
        raise typer.Exit(EXIT_REFUSED) from None
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
    output: str = "text",
) -> Any:
    """The sync itself; each way it can fail becomes its message and exit code."""
    from toolkit.store import (
        ManifestDamaged,
        NotAStore,
        StoreLinked,
        StoreWriteError,
        SyncFailed,
        WrongDeployment,
        sync,
    )

    try:
        with client:
            return sync(client, out, resources=wanted or None, progress=display, **options)
    except KeyboardInterrupt:
        raise _interrupted(err, display, out) from None
    except SyncFailed as exc:
        raise _some_failed(err, exc, client, quiet=quiet, output=output) from None
    except (NotAStore, ManifestDamaged) as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    except (WrongDeployment, StoreLinked) as exc:  # the message begins with "refused:" already
        err.print(_line("refused", None, str(exc).removeprefix("refused: ")))
        raise typer.Exit(EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise _fail(err, "sync failed", _where(display), exc, EXIT_WRITE_FAILED) from None
    except ConfigurationError as exc:
        raise _fail(err, "configuration error", _where(display), exc, EXIT_REFUSED) from None
    except PmtkError as exc:
        failed = display.failures[-1] if display.failures else None
        staged = failed.staged_pages if failed is not None else 0
        advice = _advice(exc, staged, client)
        # Refused credentials, or an address never reached: nothing was done (exit 2).
        refused = isinstance(exc, AuthError) or (
            isinstance(exc, TransportError) and not getattr(display, "progressed", True)
        )
        code = EXIT_REFUSED if refused else EXIT_FAILED
        raise _fail(err, "sync failed", _where(display), exc, code, advice) from None


def _check_target(err: Any, out: Path) -> None:
    """Refuse a folder that is not a store (or is damaged) before anything is sent."""
    from toolkit.store import ManifestDamaged, NotAStore, StoreWriteError, check_folder

    try:
        check_folder(out)
    except (NotAStore, ManifestDamaged) as exc:
        raise _fail(err, "refused", None, exc, EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise _fail(err, "sync failed", None, exc, EXIT_WRITE_FAILED) from None
    except PmtkError as exc:  # a newer store format, a link inside the store
        err.print(_line("refused", None, str(exc).removeprefix("refused: ")))
        raise typer.Exit(EXIT_REFUSED) from None


def _default_out(
    err: Any, base_url: str | None, client_id: str | None, client_secret: str | None
) -> Path:
    """``pmtk-store`` for a configured deployment, ``pmtk-store-mock`` for the embedded mock.

    The mock's synthetic rows must never land in the folder a real deployment's
    sync uses by default.
    """
    from toolkit.store import DEFAULT_STORE, MOCK_STORE

    try:
        real = configured(base_url=base_url, client_id=client_id, client_secret=client_secret)
    except ConfigurationError as exc:
        fix = "set PM_BASE_URL, PM_CLIENT_ID and PM_CLIENT_SECRET (or the matching options)"
        raise _fail(err, "configuration error", None, exc, EXIT_REFUSED, fix) from None
    return Path(DEFAULT_STORE if real else MOCK_STORE)


def _connect(
    err: Any, base_url: str | None, client_id: str | None, client_secret: str | None
) -> Any:
    """A client from the options, else the settings path (``PM_*``, ``.env``, the mock)."""

    settings = connection_settings(base_url, client_id, client_secret)
    try:
        return toolkit.connect(**settings)
    except ConfigurationError as exc:
        # A missing setting gets the command line's fix; every other message says its own.
        missing = str(exc).startswith("no ")
        fix = (
            "set PM_BASE_URL, PM_CLIENT_ID and PM_CLIENT_SECRET (or the matching options)"
            if missing
            else None
        )
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


def _some_failed(
    err: Any, exc: Any, client: Any, *, quiet: bool, output: str = "text"
) -> typer.Exit:
    """One line per failed resource with advice, then the summary: exit 1."""
    for failed in exc.summary.failed:
        cause = exc.errors.get(failed.resource)
        advice = _advice(cause, failed.staged_pages, client) if cause is not None else None
        err.print(_line("sync failed", failed.resource, failed.error or "", hint=advice))
    _print_repaired(err, exc.summary)
    _print_summary(exc.summary, quiet=quiet, output=output)
    return typer.Exit(EXIT_FAILED)


def _resources(names: list[str] | None) -> list[str]:
    """The ``--resource`` values, checked against the listed resources (usage error otherwise)."""
    import difflib

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
    """One line of text, never read as markup, redacted: ``label (resource): message. hint``."""
    from rich.text import Text

    text = Text(label, style=style)
    if resource:
        text.append(f" ({resource})")
    text.append(": ")
    body = " ".join(message.split())
    if hint:
        body = f"{body.rstrip('. ')}. {hint}"
    text.append(redact(body))
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
    if isinstance(exc, ProtocolError):
        return f"the deployment's answer could not be read (see above); {again}"
    if isinstance(exc, RedirectRefused):
        return "nothing of it was stored; check PM_BASE_URL (or --base-url) is the API's address"
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
    from rich.text import Text

    from toolkit.store import ManifestDamaged, NotAStore, verify

    err = make_console(stderr=True)
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
        make_console().print(
            Text(
                f"verified {len(report.files)} files ({report.bytes / 1e6:.1f} MB) in "
                f"{out}: all match their sha256 ({report.elapsed:.2f} s)"
            )
        )
