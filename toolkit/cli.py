"""The ``pmtk`` command line: ``pmtk mock``, ``pmtk check``, ``pmtk sync``, ``pmtk notebooks``.

Each subcommand lives beside the code it drives; this module only assembles them,
so that ``pmtk --help`` stays cheap (heavy imports happen inside the commands).
"""

from __future__ import annotations

import typer

from toolkit.mock.command import mock_command
from toolkit.notebooks import notebooks_command

app = typer.Typer(
    name="pmtk",
    no_args_is_help=True,
    add_completion=False,
    help="Practice-management API toolkit: mock deployment, contract checks, sync.",
)
app.command("mock")(mock_command)
app.command("notebooks")(notebooks_command)


def main() -> None:  # pragma: no cover - console entry point
    app()
