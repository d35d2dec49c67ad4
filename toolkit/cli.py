"""The ``pmtk`` command line: ``pmtk mock``, ``pmtk check``, ``pmtk sync``, ``pmtk notebooks``.

Each subcommand lives beside the code it drives; this module only assembles them,
so that ``pmtk --help`` stays cheap (heavy imports happen inside the commands).
"""

from __future__ import annotations

import typer

from contracts.command import check_command
from toolkit import __version__
from toolkit._cli import typer_app
from toolkit.mock.command import mock_command
from toolkit.notebooks import notebooks_command
from toolkit.sync_command import sync_command
from toolkit.viewdefs.command import views_app
from toolkit.webhooks import listen_command

app = typer_app(
    name="pmtk",
    no_args_is_help=True,
    add_completion=False,
    help="Practice-management API toolkit: mock deployment, contract checks, sync.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pmtk {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print pmtk's version and exit.",
    ),
) -> None:
    """Practice-management API toolkit: mock deployment, contract checks, sync."""


app.command("mock")(mock_command)
app.command("check")(check_command)
app.command("notebooks")(notebooks_command)
app.command("sync")(sync_command)
app.command("listen")(listen_command)
app.add_typer(views_app, name="views")


def main() -> None:  # pragma: no cover - console entry point
    app()
