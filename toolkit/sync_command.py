"""``pmtk sync``: pull every listed resource into a local Parquet store.

Heavy imports (polars, the client, the store) happen inside the command, so that
``pmtk --help`` stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["sync_command"]


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
) -> None:
    """Sync resources into a Parquet store; an interrupted run resumes where it stopped."""
    from rich.console import Console

    import toolkit
    from toolkit.errors import PmtkError
    from toolkit.store import sync

    if errors not in ("raise", "warn"):
        raise typer.BadParameter("must be 'raise' or 'warn'", param_hint="--errors")
    console = Console(stderr=True)
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
            f"[yellow]interrupted[/]: the store at {out} is unchanged for the resource in "
            "progress; run the same command again to resume."
        )
        raise typer.Exit(130) from None
    except PmtkError as exc:
        console.print(f"[red]sync failed[/]: {exc}")
        console.print(f"Staged pages are kept; run the same command again to resume ({out}).")
        raise typer.Exit(1) from None
    if not quiet:
        Console().print(summary.table())
