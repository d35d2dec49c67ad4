"""``pmtk sync``: pull every listed resource into a local Parquet store.

Heavy imports (polars, the client, the store) happen inside the command, so that
``pmtk --help`` stays cheap.

Exit codes (also in ``docs/store.md``):

====  =====================================================================
0     synced (or, with ``--verify``, every file matched its checksum)
1     the sync failed: API, network, validation, or another sync holds the lock
2     refused, nothing written: the folder is not a pmtk store, its manifest is
      damaged, or an option is invalid
3     ``--verify`` found damaged or missing data files (each is listed)
4     writing failed locally: disk full, read-only or forbidden folder; the
      data stored before is unchanged
130   interrupted (Ctrl-C); run the same command again to resume
====  =====================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

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


def sync_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Store directory (created when missing).")
    ] = Path("pmtk-store"),
    resource: Annotated[
        list[str] | None,
        typer.Option(
            "--resource",
            "-r",
            help="Resource type to sync; repeat for several. Default: every listed resource.",
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Re-fetch everything instead of only what changed.")
    ] = False,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            envvar="PM_BASE_URL",
            help="Regional address including /main. Default: the embedded mock.",
        ),
    ] = None,
    client_id: Annotated[
        str | None, typer.Option("--client-id", envvar="PM_CLIENT_ID", help="OAuth client id.")
    ] = None,
    client_secret: Annotated[
        str | None,
        typer.Option(
            "--client-secret",
            envvar="PM_CLIENT_SECRET",
            help="OAuth client secret (prefer the environment variable).",
            show_default=False,
        ),
    ] = None,
    errors: Annotated[
        str,
        typer.Option(
            "--errors",
            help="On a schema failure: 'raise' (store nothing for that resource) or 'warn'.",
        ),
    ] = "raise",
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bars and no summary table.")
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Check every stored file against its recorded sha256 instead of syncing "
            "(exit 3 and the damaged files listed when any fails).",
        ),
    ] = False,
) -> None:
    """Sync resources into a Parquet store; an interrupted run resumes where it stopped."""
    from rich.console import Console
    from rich.markup import escape

    import toolkit
    from toolkit.errors import PmtkError
    from toolkit.store import (
        ManifestDamaged,
        NotAStore,
        StoreWriteError,
        check_folder,
        sync,
    )

    if errors not in ("raise", "warn"):
        raise typer.BadParameter("must be 'raise' or 'warn'", param_hint="--errors")
    console = Console(stderr=True, soft_wrap=True)  # soft_wrap: one error, one line

    def fail(label: str, exc: BaseException, code: int) -> typer.Exit:
        console.print(f"[red]{label}[/]: {escape(str(exc))}")
        return typer.Exit(code)

    if verify:
        _verify(out, resource, quiet=quiet)
        return
    try:
        check_folder(out)  # before connecting: a refusal writes nothing and costs nothing
    except (NotAStore, ManifestDamaged) as exc:
        raise fail("refused", exc, EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise fail("sync failed", exc, EXIT_WRITE_FAILED) from None
    except PmtkError as exc:
        raise fail("refused", exc, EXIT_REFUSED) from None  # e.g. a newer store format
    settings: dict[str, Any] = {
        key: value
        for key, value in (
            ("base_url", base_url),
            ("client_id", client_id),
            ("client_secret", client_secret),
        )
        if value
    }
    try:
        with toolkit.connect(**settings) as client:
            summary = sync(
                client,
                out,
                resources=resource or None,
                full=full,
                progress=False if quiet else None,
                errors=errors,  # type: ignore[arg-type]
            )
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted[/]: the store at {escape(str(out))} is unchanged for the "
            "resource in progress; run the same command again to resume."
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except (NotAStore, ManifestDamaged) as exc:
        raise fail("refused", exc, EXIT_REFUSED) from None
    except StoreWriteError as exc:
        raise fail("sync failed", exc, EXIT_WRITE_FAILED) from None
    except PmtkError as exc:
        console.print(f"[red]sync failed[/]: {escape(str(exc))}")
        console.print(
            f"Staged pages are kept; run the same command again to resume ({escape(str(out))})."
        )
        raise typer.Exit(EXIT_FAILED) from None
    for result in summary.resources:
        if result.repaired:
            console.print(
                f"[yellow]repaired[/]: {result.resource} was re-fetched in full because "
                f"{', '.join(map(escape, result.repaired))} failed verification"
            )
    if not quiet:
        Console().print(summary.table())


def _verify(out: Path, resources: list[str] | None, *, quiet: bool) -> None:
    """``pmtk sync --verify``: hash every stored file; list the damaged ones; exit 0 or 3."""
    from rich.console import Console
    from rich.markup import escape

    from toolkit.errors import PmtkError
    from toolkit.store import ManifestDamaged, NotAStore, verify

    err = Console(stderr=True, soft_wrap=True)
    try:
        report = verify(out, resources or None)
    except (NotAStore, ManifestDamaged) as exc:
        err.print(f"[red]refused[/]: {escape(str(exc))}")
        raise typer.Exit(EXIT_REFUSED) from None
    except PmtkError as exc:
        err.print(f"[red]verify failed[/]: {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    for problem in report.problems:
        err.print(f"[red]damaged[/]: {escape(problem.describe(out))}")
    if not report.ok:
        err.print(
            f"{len(report.problems)} of {len(report.files)} files in {escape(str(out))} "
            "failed verification"
        )
        raise typer.Exit(EXIT_DAMAGED)
    if not quiet:
        Console(soft_wrap=True).print(
            f"verified {len(report.files)} files ({report.bytes / 1e6:.1f} MB) in "
            f"{escape(str(out))}: all match their sha256 ({report.elapsed:.2f} s)"
        )
