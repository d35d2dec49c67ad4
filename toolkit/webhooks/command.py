"""``pmtk listen``: the receiver served with uvicorn, and its command line."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from toolkit._options import BaseUrl, ClientId, ClientSecret, connection_settings
from toolkit._serving import start, until_interrupted
from toolkit.webhooks.events import DEFAULT_MAX_BODY_BYTES
from toolkit.webhooks.listener import Listener, _make_app
from toolkit.webhooks.queue import AuthHeader


@contextlib.contextmanager
def listen(
    store: str | os.PathLike[str] = "pmtk-store",
    *,
    client: Any = None,
    port: int = 0,
    auth_header: AuthHeader | str | None = None,
    catch_up: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    errors: Literal["raise", "warn"] = "raise",
    log_level: str = "warning",
) -> Iterator[Listener]:
    """Receive webhooks on 127.0.0.1 and keep the store at ``store`` current.

    Parameters
    ----------
    store
        The store directory (missing, empty or a pmtk store). The event queue
        lives in its ``.webhooks/`` folder.
    client
        A :class:`toolkit.Client` used for the catch-up sync and one GET per
        changed record; ``None`` uses :func:`toolkit.connect`.
    port
        Port on 127.0.0.1 (``0`` picks a free one; see ``listener.port``).
    auth_header
        The authentication header every webhook must carry, as an
        :class:`AuthHeader` or ``"NAME:VALUE"``; ``None`` accepts any caller.
    catch_up
        Run an incremental sync of the announced resources first (events that
        arrive meanwhile are queued and applied after it).
    max_body_bytes
        Larger bodies are refused with 413.
    errors
        ``"raise"``: a record that fails its schema is set aside in
        ``.webhooks/failed/`` (the others are applied); ``"warn"``: it is stored
        anyway and a :class:`toolkit.schemas.PmtkDataWarning` is emitted.

    Yields
    ------
    Listener
        ``listener.url`` to configure in the sender, ``listener.stats``.

    Raises
    ------
    toolkit.store.NotAStore
        ``store`` is not empty and not a pmtk store (nothing written).
    """

    root = Path(store)
    _prepare_store(root)
    header = AuthHeader.parse(auth_header) if isinstance(auth_header, str) else auth_header
    owned = None
    if client is None:
        import toolkit

        owned = client = toolkit.connect()
    listener = Listener(
        root,
        client,
        auth_header=header,
        max_body_bytes=max_body_bytes,
        catch_up=catch_up,
        errors=errors,
    )
    config = _receiver_config(listener, port, log_level)
    running = None
    try:
        running = start(config, name="pmtk-listen", what="the webhook receiver", timeout=30)
        listener.port = running.port
        listener.url = f"http://127.0.0.1:{running.port}/webhook"
        listener.start_worker()
        yield listener
    finally:
        if running is not None:
            running.stop()
        listener.stop_worker()
        if owned is not None:
            owned.close()


def _prepare_store(root: Path) -> None:
    """Claim the folder as a store (refusing a user's folder) and give it a manifest."""
    from toolkit.store import _claim, _init_manifest, _locked

    _claim(root)
    with _locked(root):
        _claim(root)
        _init_manifest(root)


def _receiver_config(listener: Listener, port: int, log_level: str) -> Any:
    """The uvicorn configuration of the receiver: 127.0.0.1, no lifespan, no server header."""
    import uvicorn

    return uvicorn.Config(
        _make_app(listener),
        host="127.0.0.1",
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        server_header=False,
    )


StoreOption = Annotated[
    Path, typer.Option("--store", "-s", help="Store directory to keep current.")
]
Port = Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 picks a free one).")]
AuthHeaderOption = Annotated[
    str | None,
    typer.Option(
        "--auth-header",
        envvar="PM_WEBHOOK_AUTH_HEADER",
        help="NAME:VALUE every webhook must carry (prefer the environment variable).",
        show_default=False,
    ),
]
CatchUp = Annotated[
    bool, typer.Option("--catch-up/--no-catch-up", help="Run an incremental sync first.")
]
MaxBodyBytes = Annotated[int, typer.Option(help="Largest webhook body accepted (413 beyond).")]
Output = Annotated[
    str,
    typer.Option("--output", help="'text' (three lines) or 'json' (one line) for the banner."),
]


def listen_command(
    store: StoreOption = Path("pmtk-store"),
    port: Port = 8090,
    auth_header: AuthHeaderOption = None,
    catch_up: CatchUp = True,
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    max_body_bytes: MaxBodyBytes = DEFAULT_MAX_BODY_BYTES,
    output: Output = "text",
) -> None:
    """Receive webhooks on 127.0.0.1 and keep a Parquet store current until Ctrl-C."""
    from toolkit.errors import AuthError, ConfigurationError, PmtkError

    if output not in ("text", "json"):
        raise typer.BadParameter("must be 'text' or 'json'", param_hint="'--output'")

    logging.basicConfig(level=logging.INFO, format="pmtk listen: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per GET is noise
    try:
        header = AuthHeader.parse(auth_header) if auth_header else None
        import toolkit

        kwargs = connection_settings(base_url, client_id, client_secret)
        with (
            toolkit.connect(**kwargs) as client,
            listen(
                store,
                client=client,
                port=port,
                auth_header=header,
                catch_up=catch_up,
                max_body_bytes=max_body_bytes,
            ) as listener,
        ):
            _banner(listener.url, store, header, output=output)
            until_interrupted("listening")
    except (ConfigurationError, AuthError) as exc:  # settings or credentials: refused (2)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except PmtkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _banner(url: str, store: Path, header: AuthHeader | None, *, output: str = "text") -> None:
    """Where the receiver listens, the store it keeps and its authentication (never the value)."""
    if output == "json":
        import json

        shown_json = {"name": header.name, "value": "hidden"} if header else None
        banner = {"webhook_url": url, "store": str(store), "auth_header": shown_json}
        typer.echo(json.dumps(banner))
        return
    typer.echo(f"webhook URL: {url}")
    typer.echo(f"store:       {store}")
    shown = f"{header.name} (value hidden)" if header else "none (any caller accepted)"
    typer.echo(f"auth header: {shown}")
