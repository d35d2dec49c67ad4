"""Serving an ASGI app with uvicorn on a background thread, for the mock and ``pmtk listen``.

Both start a uvicorn server on 127.0.0.1 in a daemon thread, wait until it listens,
and need the port it bound (``0`` asks the system for a free one); both stop it the
same way. The wait and the stop are written here once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from toolkit.errors import ConfigurationError


@dataclass(slots=True)
class Running:
    """A uvicorn server running on its own thread, and the port it bound."""

    server: Any  # uvicorn.Server
    thread: threading.Thread
    port: int

    def stop(self, timeout: float = 10) -> None:
        """Ask the server to exit and wait (at most ``timeout`` seconds) for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout)


def start(
    config: Any, *, name: str, what: str, timeout: float, sockets: list[Any] | None = None
) -> Running:
    """Run ``uvicorn.Server(config)`` on a daemon thread and wait until it listens.

    ``sockets``: bound sockets to listen on instead of ``config.host:config.port``
    (closed with the server).

    Raises
    ------
    ConfigurationError
        The server thread died (for example, the port is taken) or did not start
        within ``timeout`` seconds; ``what`` names it in the message.
    """
    import uvicorn

    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": sockets}, name=name, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            msg = f"{what} could not start on {config.host}:{config.port}"
            raise ConfigurationError(msg)
        if time.monotonic() > deadline:
            server.should_exit = True
            msg = f"{what} did not start within {timeout:g} s"
            raise ConfigurationError(msg)
        time.sleep(0.005)
    bound = config.port
    for srv in server.servers:
        for sock in srv.sockets:
            bound = sock.getsockname()[1]
    return Running(server, thread, bound)


def until_interrupted(doing: str) -> None:
    """Block until Ctrl-C, saying so on stderr (``"serving until Ctrl-C"``, then ``"stopping"``)."""
    import typer

    typer.echo(f"{doing} until Ctrl-C", err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        typer.echo("stopping", err=True)
