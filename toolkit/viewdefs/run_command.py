"""``pmtk views run VIEW.json``: the command-line twin of SQL-on-FHIR's ``$viewdefinition-run``.

The view is read and checked first (a bad view: exit 2, nothing read or fetched).
The records come from a store's raw records (``--store``) or from a deployment
(fetched by the client: ``PM_*`` settings, the options, else the embedded mock).
``--since`` keeps the records updated after a time (the operation's ``_since``),
``--limit`` the first rows (its ``_limit``). The rows go to ``--output`` (written to a
temporary name and moved into place: a reader never sees half a file) or to
standard output, as CSV, NDJSON, JSON or Parquet. A reader that stops early
(``| head``) ends the command quietly.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import polars as pl
import typer

import toolkit
from toolkit._cli import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_REFUSED,
    EXIT_WRITE_FAILED,
    is_plain,
    make_console,
)
from toolkit._options import connection_settings
from toolkit.errors import (
    AuthError,
    ConfigurationError,
    DataValidationError,
    PmtkError,
    ViewDefinitionError,
)
from toolkit.redaction import redact
from toolkit.store import StoreDamaged, StoreError
from toolkit.store.entry import load
from toolkit.store.raw import bundle_pages, raw_table
from toolkit.viewdefs import load_view, run_view

if TYPE_CHECKING:
    from rich.console import Console

    from toolkit.viewdefs.definition import View

__all__ = ["FORMATS", "encode", "parse_since", "run_view_command"]

FORMATS = ("csv", "ndjson", "json", "parquet")

_PAGE = 1000
"""Raw records wrapped per Bundle page (the runner's fast read takes Bundle pages)."""


def parse_since(text: str) -> datetime:
    """``--since``: an ISO date or date-time; one without an offset is UTC."""
    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        msg = f"--since {text!r} is not an ISO date or date-time (2026-01-31T09:00:00Z)"
        raise typer.BadParameter(msg) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _instant(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def store_pages(store: Path, resource_type: str, since: datetime | None) -> tuple[list[bytes], int]:
    """The store's raw records of ``resource_type`` as Bundle pages, and how many.

    With ``since``, only the records whose ``meta.lastUpdated`` is after it (a
    record without one cannot be said to be, and is left out).
    """

    frame = load(resource_type, store, table=raw_table(resource_type))
    assert isinstance(frame, pl.DataFrame)  # not lazy: load's default
    records: list[bytes] = frame.get_column("json").to_list()
    if since is not None:
        stamps = frame.get_column("last_updated").to_list()
        records = [
            r
            for r, s in zip(records, stamps, strict=True)
            if (when := _instant(s)) is not None and when > since
        ]
    return bundle_pages(records, _PAGE), len(records)


def _for_text(frame: pl.DataFrame) -> pl.DataFrame:
    """Collection (list) columns as JSON arrays, for CSV, which has no lists."""
    lists = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)]
    if not lists:
        return frame
    return frame.with_columns(
        pl.Series(name, [orjson.dumps(v).decode() if v is not None else None for v in frame[name]])
        for name in lists
    )


def encode(frame: pl.DataFrame, fmt: str) -> bytes:
    """The rows in ``fmt``: CSV with a header, NDJSON, a JSON array of objects, or Parquet."""
    if fmt == "csv":
        return _for_text(frame).write_csv().encode("utf-8")
    if fmt == "ndjson":
        return frame.write_ndjson().encode("utf-8")
    if fmt == "json":
        return frame.write_json().encode("utf-8")
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _write_file(path: Path, data: bytes) -> None:
    """``data`` at ``path`` by a temporary file moved into place (never half a file)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(OSError):
            temp.unlink()


def _write_stdout(data: bytes) -> None:
    """``data`` on standard output; a reader that went away (``| head``) ends it quietly."""
    out = getattr(sys.stdout, "buffer", None)
    try:
        if out is None:
            sys.stdout.write(data.decode("utf-8"))
        else:
            out.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None


def _fail(err: Console, label: str, exc: BaseException | str, code: int) -> typer.Exit:
    """Print ``label: message`` (redacted, on one line) on ``err``; the exit to raise."""

    err.print(f"{label}: " + redact(" ".join(str(exc).split())), markup=False)
    return typer.Exit(code)


def _check_usage(
    err: Console,
    *,
    store: Path | None,
    connection: tuple[str | None, str | None, str | None],
    fmt: str,
    output: Path | None,
    since: str | None,
    limit: int | None,
    max_rows: int | None,
) -> datetime | None:
    """Every usage problem, before any read or request; the ``--since`` time, if given."""
    if fmt not in FORMATS:
        raise _fail(err, "usage", f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}", 2)
    if limit is not None and limit < 0:
        raise _fail(err, "usage", f"--limit must be 0 or more, not {limit}", EXIT_REFUSED)
    if max_rows is not None and max_rows < 1:
        raise _fail(err, "usage", f"--max-rows must be 1 or more, not {max_rows}", EXIT_REFUSED)
    if store is not None and any(connection):
        msg = "--store reads the store's records; --base-url and the credentials fetch: not both"
        raise _fail(err, "usage", msg, EXIT_REFUSED)
    if output is None and fmt == "parquet" and not is_plain(sys.stdout):
        msg = "Parquet is binary: give --output FILE or pipe standard output"
        raise _fail(err, "usage", msg, EXIT_REFUSED)
    try:
        return parse_since(since) if since is not None else None
    except typer.BadParameter as exc:
        raise _fail(err, "usage", exc, EXIT_REFUSED) from None


def _evaluate(
    err: Console,
    view: View,
    *,
    store: Path | None,
    connection: tuple[str | None, str | None, str | None],
    when: datetime | None,
    max_rows: int | None,
) -> tuple[pl.DataFrame, str]:
    """The view's rows over the store's records or the deployment's, and where they came from."""

    if store is not None:
        if not store.is_dir():
            raise _fail(err, "refused", f"--store {str(store)!r} is not a folder", EXIT_REFUSED)
        pages, read = store_pages(store, view.resource, when)
        source = f"{read} {view.resource} record(s) of {store}"
        return run_view(view, pages, max_rows=max_rows), source

    settings = connection_settings(*connection)
    search: dict[str, Any] = {}
    if when is not None:
        search["last_updated"] = "gt" + when.isoformat().replace("+00:00", "Z")
    with toolkit.connect(**settings) as client:
        # every page of the walk, each record once in its newest version
        client_pages = client._clean_pages(view.resource, None, None, search)
        source = f"{view.resource} of {client.base_url}"
    return run_view(view, client_pages, max_rows=max_rows), source


def _evaluate_reporting(
    err: Console, view: View, *, quiet: bool, **where: Any
) -> tuple[pl.DataFrame, str]:
    """:func:`_evaluate` under a status line, its errors as exits (damaged, refused, failed)."""

    status = None if quiet or is_plain(sys.stderr) else err.status("running the view...")
    if status is not None:
        status.start()
    try:
        return _evaluate(err, view, **where)
    except typer.Exit:
        raise
    except StoreDamaged as exc:
        raise _fail(err, "damaged", exc, EXIT_DAMAGED) from None
    except (StoreError, ConfigurationError, ViewDefinitionError, AuthError) as exc:
        # refused: a missing store or resource, settings, credentials, the view's size
        raise _fail(err, "refused", exc, EXIT_REFUSED) from None
    except DataValidationError as exc:
        raise _fail(err, "data error", exc, EXIT_FAILED) from None
    except PmtkError as exc:
        raise _fail(err, "failed", exc, EXIT_FAILED) from None
    finally:
        if status is not None:
            status.stop()


def _deliver(err: Console, data: bytes, output: Path | None) -> None:
    """The encoded rows to ``output`` (a failed write exits) or to standard output."""
    if output is None:
        _write_stdout(data)
        return
    try:
        _write_file(output, data)
    except OSError as exc:
        msg = f"{output}: {exc.strerror or exc}"
        raise _fail(err, "write failed", msg, EXIT_WRITE_FAILED) from None


def run_view_command(
    view_file: Path,
    *,
    store: Path | None,
    base_url: str | None,
    client_id: str | None,
    client_secret: str | None,
    fmt: str,
    output: Path | None,
    since: str | None,
    limit: int | None,
    max_rows: int | None,
    quiet: bool,
) -> None:
    """Run one ViewDefinition and write its rows (see the module docstring)."""

    err = make_console(stderr=True)
    connection = (base_url, client_id, client_secret)
    when = _check_usage(
        err,
        store=store,
        connection=connection,
        fmt=fmt,
        output=output,
        since=since,
        limit=limit,
        max_rows=max_rows,
    )
    try:
        view = load_view(view_file)
    except ViewDefinitionError as exc:
        raise _fail(err, f"refused ({view_file})", exc, EXIT_REFUSED) from None
    if output is not None and not output.parent.is_dir():
        msg = f"the folder of --output {str(output)!r} does not exist"
        raise _fail(err, "refused", msg, EXIT_REFUSED)
    frame, source = _evaluate_reporting(
        err, view, quiet=quiet, store=store, connection=connection, when=when, max_rows=max_rows
    )
    if limit is not None:
        frame = frame.head(limit)
    _deliver(err, encode(frame, fmt), output)
    if not quiet:
        where = f" to {output}" if output is not None else ""
        err.print(
            f"view {view.name or view_file.stem}: {frame.height} row(s) from {source}{where}",
            markup=False,
        )
