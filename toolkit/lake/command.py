"""``pmtk sync --out LAKE --deployment NAME`` (and ``--verify``) for a lake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

import toolkit
from toolkit._cli import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    emit,
    is_plain,
    make_console,
)
from toolkit.errors import ConfigurationError, PmtkError
from toolkit.lake import LakeDamaged, import_store, sync, verify
from toolkit.redaction import redact
from toolkit.store.identity import WrongDeployment


def is_lake_target(out: str | None, deployment: str | None) -> bool:
    """Whether ``pmtk sync`` writes a lake: a deployment was named, or ``out`` is one."""
    if deployment is not None:
        return True
    if out is None:
        return False
    if out.lower().startswith(("s3://", "s3a://")):
        return True
    return (Path(out) / "_pmtk" / "deployments" / "_delta_log").is_dir()


def _say(err: Any, label: str, message: str) -> None:
    from rich.text import Text

    line = Text(label, style="bold red")
    line.append(": " + redact(" ".join(message.split())))
    err.print(line)


def lake_sync_command(
    *,
    out: str | None,
    deployment: str | None,
    wanted: list[str],
    settings: dict[str, Any],
    full: bool,
    reconcile: bool,
    errors: str,
    quiet: bool,
    output: str,
    verify: bool,
    refused_options: list[str],
    from_store: Path | None = None,
    rebind: bool = False,
) -> None:
    """Run a lake sync or verify from the command line; exit codes as ``pmtk sync``."""
    err = make_console(stderr=True)
    lake = _checked_target(err, out, refused_options)
    if from_store is not None:
        _import(err, from_store, lake, deployment, quiet=quiet)
    if verify:
        _verify(err, lake, deployment, quiet=quiet)
        return
    options = {
        "deployment": deployment,
        "resources": wanted,
        "full": full,
        "reconcile": reconcile,
        "errors": "warn" if errors == "warn" else "raise",
        "rebind": rebind,
    }
    _print(_sync(err, lake, settings, options), quiet=quiet, output=output)


def _checked_target(err: Any, out: str | None, refused_options: list[str]) -> str:
    """The lake ``--out`` names, after the refusals that need no connection (exit 2)."""
    if out is None:
        _say(err, "refused", "a lake needs --out (a folder or an s3:// URL)")
        raise typer.Exit(EXIT_REFUSED)
    if refused_options:
        names = ", ".join(refused_options)
        _say(err, "refused", f"{names} is not available for a lake ({out}); nothing was written")
        raise typer.Exit(EXIT_REFUSED)
    _refuse_store(err, out)
    return out


def _verify(err: Any, lake: str, deployment: str | None, *, quiet: bool) -> None:
    """``--verify``: every damaged file one line, exit 3; else one line (unless quiet)."""

    report = verify(lake, deployment=deployment)
    for problem in report.problems:
        _say(err, "damaged", problem)
    if not report.ok:
        raise typer.Exit(EXIT_DAMAGED)
    if not quiet:
        make_console().print(f"verified {report.files} files in {lake}: all match their sha256")


def _sync(err: Any, lake: str, settings: dict[str, Any], options: dict[str, Any]) -> Any:
    """Connect and sync; each failure one line with the exit code of ``pmtk sync``."""

    try:
        client = toolkit.connect(**settings)
    except ConfigurationError as exc:
        _say(err, "configuration error", str(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    try:
        with client:
            return sync(client, lake, **options)
    except KeyboardInterrupt:
        _say(err, "interrupted", f"nothing of the resource under way was committed to {lake}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except (WrongDeployment, ConfigurationError) as exc:
        _say(err, "refused", str(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    except LakeDamaged as exc:
        _say(err, "damaged", str(exc))
        raise typer.Exit(EXIT_DAMAGED) from None
    except PmtkError as exc:  # LakeBusy, LeaseLost, another LakeError, a failed fetch
        _say(err, "sync failed", str(exc))
        raise typer.Exit(EXIT_FAILED) from None


def _import(err: Any, store: Path, out: str, deployment: str | None, *, quiet: bool) -> None:
    if deployment is None:
        _say(err, "refused", "--from-store needs --deployment NAME: the name it takes in the lake")
        raise typer.Exit(EXIT_REFUSED)
    try:
        done = import_store(store, out, deployment=deployment)
    except PmtkError as exc:
        _say(err, "refused", str(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    if not quiet:
        counts = ", ".join(f"{rt} {n:,}" for rt, n in done.items()) or "nothing"
        typer.echo(f"imported {store} into {out} as {deployment!r}: {counts}", err=True)


def _refuse_store(err: Any, out: str) -> None:
    """A Parquet store is never written as a lake (nor read as one)."""
    manifest = Path(out) / "manifest.json"
    if "://" in out or not manifest.is_file():
        return
    _say(
        err,
        "refused",
        f"{out} is a pmtk Parquet store of one practice, not a lake; nothing was written. "
        "Sync into a new folder as a lake (pmtk sync --out NEW-LAKE --deployment NAME), "
        "or keep syncing this store without --deployment",
    )
    raise typer.Exit(EXIT_REFUSED)


def _print(summary: Any, *, quiet: bool, output: str) -> None:
    rows = [
        {
            "resource": r.resource,
            "mode": r.mode,
            "fetched": r.records_fetched,
            "upserted": r.upserted,
            "stale": r.stale,
            "deleted": r.deleted,
            "requests": r.requests,
            "elapsed_s": round(r.elapsed, 2),
        }
        for r in summary.resources.values()
    ]
    if output == "json":
        doc = {"lake": summary.lake, "deployment": summary.deployment, "resources": rows}
        typer.echo(json.dumps(doc))
        return
    if quiet:
        return
    console = make_console()
    if is_plain():
        for row in rows:
            typer.echo(" ".join(f"{k}={v}" for k, v in row.items()))
    else:
        from rich.table import Table

        table = Table(title=f"{summary.deployment} in {summary.lake}")
        for key in rows[0] if rows else []:
            table.add_column(key, overflow="fold")
        for row in rows:
            table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()))
        emit(console, table)
    typer.echo(f"{summary.requests} requests; deployment {summary.deployment!r} in {summary.lake}")
