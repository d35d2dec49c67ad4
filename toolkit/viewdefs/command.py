"""``pmtk views``: the declared views as SQL-on-FHIR v2 ViewDefinitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolkit.errors import PmtkError

views_app = typer.Typer(
    name="views",
    help="The declared views as SQL-on-FHIR v2 ViewDefinitions.",
    no_args_is_help=True,
    add_completion=False,
)


@views_app.command("export")
def export_command(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder to write one <table>.json per view into (default: print)."
        ),
    ] = None,
    resource: Annotated[
        list[str] | None,
        typer.Option("--resource", help="Only this resource type's tables (repeatable)."),
    ] = None,
) -> None:
    """Export every declared table as a ViewDefinition (JSON).

    Without --out, prints one JSON array of the ViewDefinitions; with --out, writes
    <table>.json files and lists them. Each runs with ``toolkit.run_view`` (or any
    SQL-on-FHIR v2 runner) and gives the table's columns, except ``extra`` and
    ``invalid``.
    """
    from toolkit.viewdefs.declared import declared_view_definitions

    try:
        views: dict[str, dict[str, object]] = {}
        for rt in resource or [None]:  # type: ignore[list-item]
            views.update(declared_view_definitions(rt))
    except PmtkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if out is None:
        typer.echo(json.dumps(list(views.values()), indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, view in views.items():
        path = out / f"{name}.json"
        path.write_text(json.dumps(view, indent=2) + "\n", encoding="utf-8")
        typer.echo(str(path))


# the options of ``pmtk views run``
_ViewFile = Annotated[Path, typer.Argument(help="The ViewDefinition (a JSON file).")]
_Store = Annotated[
    Path | None,
    typer.Option("--store", help="Run over this store's raw records (no request is sent)."),
]
_BaseUrl = Annotated[
    str | None,
    typer.Option("--base-url", help="The API's base URL (default: PM_BASE_URL, else the mock)."),
]
_ClientId = Annotated[str | None, typer.Option("--client-id", help="OAuth client id.")]
_ClientSecret = Annotated[str | None, typer.Option("--client-secret", help="OAuth client secret.")]
_Format = Annotated[str, typer.Option("--format", "-f", help="csv, ndjson, json or parquet.")]
_Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the rows to this file (default: stdout)."),
]
_Since = Annotated[
    str | None, typer.Option("--since", help="Only records updated after this ISO date-time.")
]
_Limit = Annotated[int | None, typer.Option("--limit", help="At most this many rows.")]
_MaxRows = Annotated[
    int | None,
    typer.Option("--max-rows", help="The row budget of the evaluation (default 20 million)."),
]
_Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No status line.")]


@views_app.command("run")
def run_command(
    view: _ViewFile,
    store: _Store = None,
    base_url: _BaseUrl = None,
    client_id: _ClientId = None,
    client_secret: _ClientSecret = None,
    fmt: _Format = "csv",
    output: _Output = None,
    since: _Since = None,
    limit: _Limit = None,
    max_rows: _MaxRows = None,
    quiet: _Quiet = False,
) -> None:
    """Run a ViewDefinition over a store or a deployment (SQL-on-FHIR $viewdefinition-run).

    A bad view exits 2 before anything is read; the rows go to --output or stdout.
    """
    from toolkit.viewdefs.run_command import run_view_command

    run_view_command(
        view,
        store=store,
        base_url=base_url,
        client_id=client_id,
        client_secret=client_secret,
        fmt=fmt,
        output=output,
        since=since,
        limit=limit,
        max_rows=max_rows,
        quiet=quiet,
    )
