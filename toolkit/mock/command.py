"""``pmtk mock``: serve the mock deployment on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from toolkit import catalogue
from toolkit._serving import until_interrupted
from toolkit.errors import ConfigurationError

__all__ = ["mock_command"]


class ShapesChoice(StrEnum):
    live = "live"
    spec = "spec"


class ScaleChoice(StrEnum):
    small = "small"
    medium = "medium"
    large = "large"


Port = Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 picks a free one).")]
Seed = Annotated[int, typer.Option(help="Seed of the synthetic data.")]
Scale = Annotated[
    ScaleChoice, typer.Option(help="small ~2k, medium ~50k, large ~500k appointments.")
]
RateLimit = Annotated[int, typer.Option(help="Requests per 60 s sliding window per client.")]
TokenLifetime = Annotated[int, typer.Option(help="Real access-token lifetime in seconds.")]
ExpiresIn = Annotated[int, typer.Option(help="expires_in reported by the token endpoint.")]
TestControls = Annotated[
    bool, typer.Option("--test-controls", help="Enable /main/_test/* (test use only).")
]
FaultName = Annotated[str | None, typer.Option(help="Start with this fault profile active.")]
ShapesOption = Annotated[
    ShapesChoice,
    typer.Option(help="live: the forms seen on the live service; spec: the spec's forms."),
]
Webhook = Annotated[
    str | None,
    typer.Option(help="Announce writes to this loopback URL, as the live service does."),
]
AuthHeader = Annotated[
    str | None,
    typer.Option(
        "--auth-header",
        help="NAME:VALUE sent with every webhook (default: the environment variable "
        "PM_WEBHOOK_AUTH, which pmtk listen reads too; prefer the variable).",
        show_default=False,
    ),
]
WebhookHeader = Annotated[
    str | None,
    typer.Option(
        "--webhook-header",
        help="Deprecated name of --auth-header.",
        show_default=False,
        hidden=True,
    ),
]

WebhookConcurrency = Annotated[
    int,
    typer.Option(
        min=1,
        max=64,
        help="Webhook announcements in flight at once (1: one at a time, in write order).",
    ),
]


def mock_command(
    port: Port = 8000,
    seed: Seed = 0,
    scale: Scale = ScaleChoice.small,
    rate_limit: RateLimit = catalogue.RATE_LIMIT_PER_MINUTE,
    token_lifetime: TokenLifetime = catalogue.TOKEN_LIFETIME_STATED,
    expires_in: ExpiresIn = catalogue.EXPIRES_IN_STATED,
    test_controls: TestControls = False,
    fault: FaultName = None,
    shapes: ShapesOption = ShapesChoice.live,
    webhook: Webhook = None,
    auth_header: AuthHeader = None,
    webhook_header: WebhookHeader = None,
    webhook_concurrency: WebhookConcurrency = 8,
) -> None:
    """Serve a mock practice-management deployment on 127.0.0.1 until Ctrl-C."""
    from toolkit.mock.server import serve
    from toolkit.webhooks.setting import auth_setting

    header = auth_setting(auth_header, command="pmtk mock", old_option=webhook_header)
    _print_deliveries()
    try:
        with serve(
            port=port,
            seed=seed,
            scale=scale.value,
            rate_limit=rate_limit,
            token_lifetime=token_lifetime,
            expires_in=expires_in,
            test_controls=test_controls,
            fault=fault,
            shapes=shapes.value,
            webhook=webhook,
            webhook_header=header if webhook else None,
            webhook_concurrency=webhook_concurrency,
        ) as dep:
            _banner(dep, test_controls=test_controls, fault=fault, shapes=shapes, webhook=webhook)
            until_interrupted("serving")
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _print_deliveries() -> None:
    """Each refused or failed webhook delivery, as a line on stderr with its status code."""
    import logging
    import sys

    class _Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            print(f"pmtk mock: {record.getMessage()}", file=sys.stderr, flush=True)

    logger = logging.getLogger("pmtk.mock.webhooks")
    if not any(isinstance(h, _Lines) for h in logger.handlers):
        logger.addHandler(_Lines())
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def _banner(
    dep: Any, *, test_controls: bool, fault: str | None, shapes: ShapesChoice, webhook: str | None
) -> None:
    """Where the mock listens, its demo credentials and what is switched on."""
    typer.echo(f"base URL:      {dep.base_url}")
    typer.echo(f"client id:     {dep.client_id}")
    typer.echo(f"client secret: {dep.client_secret}")
    if test_controls:
        typer.echo(f"test controls: {dep.base_url}/_test/ (test use only)")
    if fault:
        typer.echo(f"fault profile: {fault}")
    typer.echo(f"shapes:        {shapes.value}")
    if webhook:
        typer.echo(f"webhooks to:   {webhook}")
