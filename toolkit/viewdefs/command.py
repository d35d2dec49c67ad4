"""``pmtk views``: the declared views as SQL-on-FHIR v2 ViewDefinitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

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
    from toolkit.errors import PmtkError
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
