"""Command-line options shared by the commands that connect to a deployment.

``pmtk sync`` and ``pmtk listen`` take the same connection settings, read the same way
(option, then ``PM_`` variable; :mod:`toolkit.config` does the rest), so they are
declared once here.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["BaseUrl", "ClientId", "ClientSecret", "connection_settings"]

BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        envvar="PM_BASE_URL",
        help="Regional address including /main. Default: the embedded mock.",
    ),
]
ClientId = Annotated[
    str | None, typer.Option("--client-id", envvar="PM_CLIENT_ID", help="OAuth client id.")
]
ClientSecret = Annotated[
    str | None,
    typer.Option(
        "--client-secret",
        envvar="PM_CLIENT_SECRET",
        help="OAuth client secret (prefer the environment variable).",
        show_default=False,
    ),
]

UserAgent = Annotated[
    str | None,
    typer.Option(
        "--user-agent", envvar="PM_USER_AGENT", help="User-Agent: '<vendor name> (<vendor email>)'."
    ),
]


def connection_settings(
    base_url: str | None, client_id: str | None, client_secret: str | None
) -> dict[str, str]:
    """The connection options given on the command line, as keywords of :func:`toolkit.connect`.

    An option left out is left to the settings path (``PM_*`` variables, ``.env``, the mock).
    """
    given = {"base_url": base_url, "client_id": client_id, "client_secret": client_secret}
    return {key: value for key, value in given.items() if value}
