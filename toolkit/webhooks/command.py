"""``pmtk listen``: the receiver served with uvicorn, and its command line."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

import toolkit
from toolkit import catalogue
from toolkit._cli import is_plain
from toolkit._options import BaseUrl, ClientId, ClientSecret, connection_settings
from toolkit._protocol import Limits, guarded_protocol
from toolkit._serving import start, until_interrupted
from toolkit.errors import ConfigurationError, PmtkError
from toolkit.webhooks._output import (
    JsonLines,
    LineHandler,
    banner_json,
    banner_lines,
    echo_json,
    print_lines,
)
from toolkit.webhooks.eventlog import DEFAULT_GAP_GRACE
from toolkit.webhooks.events import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE_BYTES, note
from toolkit.webhooks.handover import (
    TAKE_OVER_WAIT,
    WorkerLock,
    ask_to_stop,
    bind,
    refuse_second,
    warm_up,
)
from toolkit.webhooks.journal import DEFAULT_MAX_DEAD_BYTES, DEFAULT_MAX_DEAD_LETTERS, EventQueue
from toolkit.webhooks.listener import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_ATTEMPTS,
    Listener,
    disk_status,
    remove_receiver_file,
    running_receiver,
    write_receiver_file,
)
from toolkit.webhooks.queue import AuthHeader
from toolkit.webhooks.receiver import make_app, split_host

LOOPBACK = "127.0.0.1"

MAX_HEADER_BYTES = 32 * 1024
"""Request line and headers at most (431 beyond), as the mock."""

HEADER_TIMEOUT = 10.0
"""Seconds to send a request head (408 beyond), as the mock."""

BODY_TIMEOUT = 10.0
"""Seconds to send a body once the head is in (408 beyond)."""


@contextlib.contextmanager
def listen(
    store: str | os.PathLike[str] | None = None,
    *,
    client: Any = None,
    port: int = 0,
    host: str = LOOPBACK,
    auth_header: AuthHeader | str | None = None,
    no_auth: bool = False,
    public_hosts: Sequence[str] = (),
    catch_up: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
    max_connections: int | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_age: float = DEFAULT_MAX_AGE,
    gap_grace: float = DEFAULT_GAP_GRACE,
    max_dead_letters: int = DEFAULT_MAX_DEAD_LETTERS,
    max_dead_bytes: int = DEFAULT_MAX_DEAD_BYTES,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
    errors: Literal["raise", "warn"] = "raise",
    log_level: str = "warning",
    deployment: str | None = None,
    take_over: bool = False,
) -> Iterator[Listener]:
    """Receive webhooks and keep the store at ``store`` current.

    Parameters
    ----------
    store
        The store directory (missing, empty or a pmtk store; the queue is in its
        ``.webhooks/``). ``None``: ``pmtk-store`` (``pmtk-store-mock`` for the mock).
    client
        A :class:`toolkit.Client` used for the catch-up sync and one GET per
        changed record; ``None`` uses :func:`toolkit.connect`.
    port
        Port to bind (``0`` picks a free one; see ``listener.port``).
    host
        Address to bind: keep ``127.0.0.1`` and put a reverse proxy in front.
    auth_header
        The authentication header every webhook must carry, as an
        :class:`AuthHeader` or ``"NAME:VALUE"``. Required unless ``no_auth``.
    no_auth
        Accept any caller; allowed only on a loopback ``host``.
    public_hosts
        The names the sender (or the proxy in front) uses to reach the receiver,
        such as ``"hooks.example.org"`` (any port) or ``"hooks.example.org:443"``.
        Other ``Host`` values than these, the bound address (and ``localhost`` on
        loopback) get 421: a page using DNS rebinding cannot reach the receiver.
    catch_up
        Catch up on what changed while nobody listened (an incremental walk).
    max_body_bytes, max_queue_bytes
        Larger bodies get 413; beyond this many bytes of unapplied changes held on
        disk, 503 with ``Retry-After``.
    max_connections
        Open connections at most (503 beyond); ``None``: a quarter of the
        process's file-descriptor limit, at most 256, so the worker keeps enough.
    max_attempts, max_age
        Attempts and seconds after which a change that cannot be read is dead.
    gap_grace
        Seconds a missing event number may still arrive (deliveries come out of
        order) before it is a gap: logged, shown by ``--status`` and healed by an
        incremental sync of the subscription's resource types.
    max_dead_letters, max_dead_bytes
        Dead letters kept at most, in rows and bytes; beyond, the oldest are removed
        and counted (``--status`` shows how many).
    header_timeout, body_timeout
        Seconds a caller has to send a request head, then its body (408 beyond).
    errors
        ``"raise"``: a record that fails its schema goes to the dead letters;
        ``"warn"``: it is stored with a :class:`toolkit.schemas.PmtkDataWarning`.
    deployment
        Keep this deployment of the lake at ``store`` current (as ``pmtk sync --out
        LAKE --deployment NAME``), through :func:`toolkit.lake.apply_changes`.
    take_over
        Replace the store's running receiver without a pause
        (:mod:`toolkit.webhooks.handover`); without it, a second receiver is refused.

    Yields
    ------
    Listener
        ``listener.url`` for the sender, ``listener.stats``, ``listener.status()``.

    Raises
    ------
    toolkit.errors.ConfigurationError
        No ``auth_header`` and no ``no_auth``, or ``no_auth`` on an address that
        is not loopback (nothing is bound); another receiver keeps the store current
        (without ``take_over``), or the one taken over did not stop in time.
    toolkit.store.NotAStore, toolkit.store.WrongDeployment
        ``store`` is not empty and not a pmtk store, or holds another deployment's
        data (nothing written).
    """
    options = {name: value for name, value in locals().items() if name in _LISTENER_OPTIONS}
    header = _checked_auth(auth_header, no_auth, host, public_hosts)
    limits = _wire_limits(max_body_bytes, max_connections, header_timeout, body_timeout)
    served = (host, port, log_level, take_over)
    with _listening((store, deployment), client, header, served, limits, options) as receiver:
        yield receiver


_LISTENER_OPTIONS = frozenset(
    {
        "max_body_bytes",
        "catch_up",
        "errors",
        "max_queue_bytes",
        "max_attempts",
        "max_age",
        "public_hosts",
        "gap_grace",
        "max_dead_letters",
        "max_dead_bytes",
    }
)
"""The arguments of :func:`listen` handed on unchanged to :class:`Listener`."""


def _checked_auth(
    auth_header: AuthHeader | str | None, no_auth: bool, host: str, public_hosts: Sequence[str]
) -> AuthHeader | None:
    """The parsed authentication header, after refusing unsafe settings (nothing bound yet)."""
    header = AuthHeader.parse(auth_header) if isinstance(auth_header, str) else auth_header
    check_auth(header, no_auth, host)
    check_public_hosts(public_hosts)
    return header


@contextlib.contextmanager
def _listening(
    where: tuple[str | os.PathLike[str] | None, str | None],
    client: Any,
    header: AuthHeader | None,
    served: tuple[str, int, str, bool],
    limits: Limits,
    options: dict[str, Any],
) -> Iterator[Listener]:
    """Prepare the store, build the :class:`Listener` and serve it until the block ends.

    ``where`` is ``(store, deployment)``: ``store`` ``None`` is the client's default
    store; with a deployment it is a lake; ``served`` is ``(host, port, log_level,
    take_over)``; ``options`` are the :class:`Listener` keyword arguments
    :func:`listen` passes on unchanged.
    """
    store, deployment = where
    host, port, log_level, take_over = served
    with _connected(client) as connected:
        from toolkit.store.identity import default_store
        from toolkit.webhooks.target import LakeTarget, StoreTarget

        root = Path(default_store(connected) if store is None else store)
        if deployment is None:
            _prepare_store(root, connected)
            target: Any = StoreTarget(root)
        else:
            target = LakeTarget(root, deployment)
            target.journal_root.mkdir(parents=True, exist_ok=True)
        listener = Listener(
            target.journal_root,
            connected,
            auth_header=header,
            bind_host=host,
            target=target,
            **options,
        )
        config = _receiver_config(listener, host, port, log_level, limits)
        with _served(listener, config, host, take_over):
            yield listener


def _wire_limits(
    max_body_bytes: int, max_connections: int | None, header_timeout: float, body_timeout: float
) -> Limits:
    """The receiver's limits on the wire (the mock's, from the shared protocol)."""
    return Limits(
        max_header_bytes=MAX_HEADER_BYTES,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        clock=time.time,
        max_body_bytes=max_body_bytes,
        max_connections=connection_cap(max_connections),
    )


@contextlib.contextmanager
def _connected(client: Any) -> Iterator[Any]:
    """``client``, or a :func:`toolkit.connect` client closed when the block ends."""
    if client is not None:
        yield client
        return

    with toolkit.connect() as owned:
        yield owned


@contextlib.contextmanager
def _served(listener: Listener, config: Any, host: str, take_over: bool) -> Iterator[None]:
    """Serve the receiver and run its worker until the block ends; both always stopped.

    The worker runs only while this process holds the journal's :class:`WorkerLock`.
    With ``take_over`` the receiver serves (beside the running one, on the same port)
    before that lock is free; the old receiver is then asked to stop, and the worker
    starts once it has (:mod:`toolkit.webhooks.handover`).
    """
    lock = WorkerLock(listener.store)  # the folder of the journal: the store, or the lake's
    if not take_over and not lock.take(0):
        raise refuse_second(listener.store)
    running = None
    sock = None
    try:
        preload()
        if take_over:
            listener.events.defer_saves()  # until the old receiver's last save is adopted
            took = warm_up(listener.target.synced_types())
            note(logging.INFO, "taking over: warmed up in %.2f s", took)
        sock = bind(host, config.port, take_over=take_over)
        running = start(
            config, name="pmtk-listen", what="the webhook receiver", timeout=30, sockets=[sock]
        )
        listener.port = running.port
        shown = f"[{host}]" if ":" in host else host
        listener.url = f"http://{shown}:{running.port}/webhook"
        if take_over:
            _take_over(listener, lock)
        listener.start_worker()
        write_receiver_file(listener.store, host, running.port)
        yield
    finally:
        if running is not None:
            running.stop()
        elif sock is not None:
            sock.close()
        listener.stop_worker()
        remove_receiver_file(listener.store)
        lock.release()


def _take_over(listener: Listener, lock: WorkerLock) -> None:
    """Ask the running receiver to stop, wait until its worker has, adopt what it knew."""

    if lock.take(0):
        note(logging.INFO, "taking over: no other receiver runs; starting the worker")
    else:
        pid = ask_to_stop(listener.store)
        note(
            logging.INFO,
            "taking over from pid %s: serving on port %d beside it, waiting for it to stop",
            "unknown" if pid is None else pid,
            listener.port,
        )
        if not lock.take(TAKE_OVER_WAIT):
            msg = (
                f"the receiver being taken over did not stop within {TAKE_OVER_WAIT:g} s; "
                "what this one received stays in the journal for the worker that runs next"
            )
            raise ConfigurationError(msg)
    listener.events.adopt()


def preload() -> None:
    """Import, before serving, the modules the intake and the worker would otherwise
    import on first use.

    Importing opens files: in a storm of connections that holds every descriptor,
    a first delivery failed with EMFILE importing anyio's asyncio backend (its
    thread pool), and a first commit importing the store's writer. Loaded here, the
    receiver and the worker need no descriptor but the sockets and store files.
    """
    import anyio._backends._asyncio  # noqa: F401
    import starlette.concurrency  # noqa: F401

    import toolkit.store.merge
    import toolkit.store.precedence
    import toolkit.store.raw  # noqa: F401


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost`` counts)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_auth(header: AuthHeader | None, no_auth: bool, host: str) -> None:
    """Refuse to serve without an authentication header, unless told so on loopback."""

    if header is not None:
        return
    if not no_auth:
        msg = (
            "the webhook receiver needs an authentication header: set PM_WEBHOOK_AUTH to "
            "'NAME: VALUE' (the header the sender is configured to send) or pass --auth-header; "
            "--no-auth accepts any caller and is allowed on a loopback address only"
        )
        raise ConfigurationError(msg)
    if not is_loopback(host):
        msg = (
            f"--no-auth is allowed only on a loopback address, not {host!r}: anyone who "
            "reaches the port could make the receiver read and change the store"
        )
        raise ConfigurationError(msg)


def check_public_hosts(names: Sequence[str]) -> None:
    """Refuse a ``--public-host`` that is not a host name with an optional port."""

    for name in names:
        parsed = split_host(name) if isinstance(name, str) else None
        if parsed is None or not parsed[0]:
            msg = (
                f"--public-host {str(name)[:60]!r} is not a host name with an optional "
                "port, such as hooks.example.org or hooks.example.org:443"
            )
            raise ConfigurationError(msg)


def connection_cap(requested: int | None) -> int:
    """Connections served at once: as asked, or a quarter of the descriptor limit (<= 256)."""
    if requested is not None:
        return max(1, requested)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 256
    if soft == getattr(resource, "RLIM_INFINITY", -1) or soft <= 0:
        return 256
    return max(8, min(256, soft // 4))


def _prepare_store(root: Path, client: Any) -> None:
    """Claim the folder as a store (refusing a user's folder or another deployment's
    store) and give it a manifest naming the client's deployment."""
    from toolkit.store import deployment_of, read_manifest
    from toolkit.store.identity import DISCARDING, check_deployment
    from toolkit.store.identity import bind as _bind
    from toolkit.store.layout import claim as _claim
    from toolkit.store.layout import init_manifest as _init_manifest
    from toolkit.store.layout import locked as _locked

    _claim(root)
    current = deployment_of(client)
    if (root / "manifest.json").is_file():  # refused before the lock: nothing is touched
        manifest = read_manifest(root)
        if check_deployment(root, manifest, current) == "keep" and DISCARDING not in manifest:
            # this deployment's store already: nothing to write, so no lock to take (a
            # running receiver's commits hold it while a --take-over starts)
            return
    with _locked(root):
        _claim(root)
        _init_manifest(root)
        _bind(root, current)


def _receiver_config(
    listener: Listener, host: str, port: int, log_level: str, limits: Limits
) -> Any:
    """The uvicorn configuration of the receiver: the shared hardened protocol, no lifespan."""
    import uvicorn

    return uvicorn.Config(
        make_app(listener),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        # head size, head and body deadlines, body cap, connection cap (toolkit/_protocol.py)
        http=guarded_protocol(limits),
        timeout_keep_alive=5,
        # asyncio accepts up to ``backlog`` connections each time the socket is
        # readable, before any is refused: at the cap, a flood cannot take more
        # descriptors at once than the cap (uvicorn's default is 2048)
        backlog=max(16, limits.max_connections or 256),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,  # if h11 is ever chosen
        server_header=False,
        # uvicorn's own lines (on stderr) in colour only where pmtk's are (NO_COLOR, a pipe)
        use_colors=None if not is_plain(sys.stderr) else False,
    )


StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        "-s",
        help="Store directory to keep current (default pmtk-store, or pmtk-store-mock for "
        "the embedded mock, as pmtk sync).",
        show_default=False,
    ),
]
Port = Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")]
ListenDeployment = Annotated[
    str | None,
    typer.Option(
        "--deployment",
        help="Keep this deployment of the Delta Lake at --store current (as pmtk sync "
        "--out LAKE --deployment NAME).",
        show_default=False,
    ),
]
Host = Annotated[
    str,
    typer.Option(help="Address to bind; keep 127.0.0.1 and put a reverse proxy in front."),
]
AuthHeaderOption = Annotated[
    str | None,
    typer.Option(
        "--auth-header",
        help="NAME:VALUE every webhook must carry (default: the environment variable "
        "PM_WEBHOOK_AUTH, which pmtk mock --webhook reads too; prefer the variable).",
        show_default=False,
    ),
]
PublicHost = Annotated[
    list[str] | None,
    typer.Option(
        "--public-host",
        help="A name the sender uses to reach the receiver (its Host header), e.g. "
        "hooks.example.org; repeat for several. Other Host values get 421.",
        show_default=False,
    ),
]
NoAuth = Annotated[
    bool,
    typer.Option(
        "--no-auth", help="Accept webhooks without an authentication header (loopback only)."
    ),
]
CatchUp = Annotated[
    bool, typer.Option("--catch-up/--no-catch-up", help="Run an incremental sync first.")
]
MaxBodyBytes = Annotated[int, typer.Option(help="Largest webhook body accepted (413 beyond).")]
MaxQueueBytes = Annotated[
    int, typer.Option(help="Unapplied changes held on disk, in bytes (503 beyond).")
]
MaxConnections = Annotated[
    int | None,
    typer.Option(
        help="Open connections at most (503 beyond); default a quarter of the open-file "
        "limit, at most 256.",
        show_default=False,
    ),
]
MaxAttempts = Annotated[
    int, typer.Option(help="Reads of one change before it goes to the dead letters.")
]
GapGrace = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="Seconds a missing event number may still arrive before the gap is healed by a sync.",
    ),
]
RequestsPerMinute = Annotated[
    int,
    typer.Option(
        min=0,
        help="Pace the record reads to this many a minute (the API allows 500); 0: no "
        "pacing, for a deployment with a higher limit or a local mock.",
    ),
]
TakeOver = Annotated[
    bool,
    typer.Option(
        "--take-over",
        help="Replace the pmtk listen that keeps this store current without a pause: "
        "serve on the same port beside it, then stop it (a restart loses no time).",
    ),
]
Status = Annotated[
    bool,
    typer.Option(
        "--status", help="Show the queue, dead letters and last error of the store, then exit."
    ),
]
MaxDeadLetters = Annotated[
    int,
    typer.Option(min=1, help="Dead letters kept at most (the oldest removed and counted)."),
]
MaxDeadBytes = Annotated[
    int,
    typer.Option(min=1, help="Bytes of dead letters kept at most (the oldest removed, counted)."),
]
DeadLetters = Annotated[
    bool,
    typer.Option("--dead-letters", help="List the dead letters with their reasons, then exit."),
]
RetryDead = Annotated[
    bool, typer.Option("--retry-dead", help="Queue the dead letters again, then exit.")
]
Output = Annotated[
    str,
    typer.Option(
        "--output",
        help="'text' (lines for a person, plain on a pipe) or 'json' (JSON Lines while "
        "running; one document for --status and --retry-dead).",
    ),
]


def listen_command(
    store: StoreOption = None,
    port: Port = 8090,
    host: Host = LOOPBACK,
    auth_header: AuthHeaderOption = None,
    no_auth: NoAuth = False,
    public_host: PublicHost = None,
    catch_up: CatchUp = True,
    base_url: BaseUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    max_body_bytes: MaxBodyBytes = DEFAULT_MAX_BODY_BYTES,
    max_queue_bytes: MaxQueueBytes = DEFAULT_MAX_QUEUE_BYTES,
    max_connections: MaxConnections = None,
    max_attempts: MaxAttempts = DEFAULT_MAX_ATTEMPTS,
    gap_grace: GapGrace = DEFAULT_GAP_GRACE,
    max_dead_letters: MaxDeadLetters = DEFAULT_MAX_DEAD_LETTERS,
    max_dead_bytes: MaxDeadBytes = DEFAULT_MAX_DEAD_BYTES,
    requests_per_minute: RequestsPerMinute = catalogue.RATE_LIMIT_PER_MINUTE,
    deployment: ListenDeployment = None,
    take_over: TakeOver = False,
    status: Status = False,
    dead_letters: DeadLetters = False,
    retry_dead: RetryDead = False,
    output: Output = "text",
) -> None:
    """Receive webhooks and keep a Parquet store current until Ctrl-C.

    An authentication header is required (PM_WEBHOOK_AUTH='NAME: VALUE'); --status
    and --retry-dead look at the store's queue and exit. --output json writes JSON
    Lines while receiving, and one JSON document for --status and --retry-dead.
    """
    from toolkit.webhooks.setting import auth_setting

    if output not in ("text", "json"):
        raise typer.BadParameter("must be 'text' or 'json'", param_hint="'--output'")
    auth_header = auth_setting(auth_header, command="pmtk listen")
    if dead_letters or status or retry_dead:
        if deployment is not None:
            from toolkit.webhooks.target import LakeTarget

            store = LakeTarget(
                Path("pmtk-lake" if store is None else store), deployment
            ).journal_root
        _look(store, port, host, auth_header, (dead_letters, status, retry_dead), output)
        return
    with _log_to(output) as lines, _exit_codes():
        header = _checked_header(auth_header, no_auth, host, port)
        connection: dict[str, Any] = {**connection_settings(base_url, client_id, client_secret)}
        connection["requests_per_minute"] = requests_per_minute or None
        served = {"port": port, "host": host, "auth_header": header, "no_auth": no_auth}
        served["public_hosts"] = tuple(public_host or ())
        limits: dict[str, int | None] = {"max_body_bytes": max_body_bytes}
        limits |= {"max_queue_bytes": max_queue_bytes}
        limits |= {"max_connections": max_connections, "max_attempts": max_attempts}
        limits |= {"max_dead_letters": max_dead_letters, "max_dead_bytes": max_dead_bytes}
        options = {**served, **limits, "catch_up": catch_up, "gap_grace": gap_grace}
        options["deployment"] = deployment
        options["take_over"] = take_over
        _receive(store, connection, options, output, lines)


def _journal_of(store: Path | None, deployment: str | None) -> Path | None:
    """The folder whose ``.webhooks/`` holds the journal: the store, or with a deployment
    the lake's folder for that deployment's receiver."""
    if deployment is None:
        return store
    from toolkit.webhooks.target import LakeTarget

    return LakeTarget(Path("pmtk-lake" if store is None else store), deployment).journal_root


def _look(
    store: Path | None,
    port: int,
    host: str,
    auth_header: str | None,
    asked: tuple[bool, bool, bool],
    output: str,
) -> None:
    """``--dead-letters``, ``--status``, ``--retry-dead`` (``asked``, in that order): look at
    the store's queue instead of receiving; ``--dead-letters`` alone lists the dead
    letters, otherwise the dead letters are retried and the status shown as asked."""
    from toolkit.store.identity import default_store

    dead_letters, status, retry_dead = asked
    if dead_letters and not (status or retry_dead):
        _list_dead(Path(default_store()) if store is None else store, output)
        return
    folder = Path(default_store()) if store is None else store
    with _exit_codes():
        header = AuthHeader.parse(auth_header) if auth_header else None
    _inspect(folder, port, host, status=status, retry_dead=retry_dead, output=output, auth=header)


def _checked_header(
    auth_header: str | None, no_auth: bool, host: str, port: int
) -> AuthHeader | None:
    """The authentication header, checked before any connection or store write; with
    ``--no-auth`` (loopback only) a warning on stderr."""
    header = AuthHeader.parse(auth_header) if auth_header else None
    check_auth(header, no_auth, host)
    if header is None:
        typer.echo(
            f"warning: --no-auth: any program on this machine that can reach "
            f"{host}:{port} can post webhooks (each change is still read from the API "
            "before it is applied)",
            err=True,
        )
    return header


@contextlib.contextmanager
def _exit_codes() -> Iterator[None]:
    """A refusal before serving exits 2 (a usage error, as ``pmtk sync``); any other
    :class:`~toolkit.errors.PmtkError` exits 1; each says why on stderr."""
    from toolkit.store import NotAStore, StoreLinked, WrongDeployment

    try:
        yield
    except (ConfigurationError, NotAStore, StoreLinked, WrongDeployment) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except PmtkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _receive(
    store: Path | None,
    connection: dict[str, Any],
    options: dict[str, Any],
    output: str,
    lines: logging.Handler,
) -> None:
    """``pmtk listen`` proper: connect, receive until Ctrl-C, then say it stopped."""

    with (
        toolkit.connect(**connection) as client,
        listen(store, client=client, **options) as listener,
    ):
        header = options["auth_header"]
        _banner(listener.url, listener.store, header, output=output, catch_up=options["catch_up"])
        if isinstance(lines, JsonLines):
            lines.flush_held()
        until_interrupted("listening")
    if output == "json":  # the worker has stopped: nothing is logged after this line
        echo_json({"event": "stopped", "status": listener.status()})


@contextlib.contextmanager
def _log_to(output: str) -> Iterator[logging.Handler]:
    """Send the receiver's log records where ``output`` says: stderr lines, or JSON Lines.

    Everything it sets (the handler, the root level, httpx's level) is put back when the
    command ends, so a command run in-process (a notebook, a test) leaves logging as it
    found it, and no handler outlives the stream it writes to.
    """
    handler: logging.Handler = JsonLines() if output == "json" else LineHandler()
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    levels = (root.level, httpx_logger.level)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    httpx_logger.setLevel(logging.WARNING)  # one line per GET is noise
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        httpx_logger.setLevel(levels[1])


def _banner(
    url: str, store: Path, header: AuthHeader | None, *, output: str = "text", catch_up: bool
) -> None:
    """Where the receiver listens, the store it keeps and its authentication (never the value)."""
    if output == "json":
        echo_json(banner_json(url, store, header, catch_up=catch_up))
    else:
        print_lines(banner_lines(url, store, header))


def _inspect(
    store: Path,
    port: int,
    host: str,
    *,
    status: bool,
    retry_dead: bool,
    output: str = "text",
    auth: AuthHeader | None = None,
) -> None:
    """``--retry-dead`` then ``--status``: from the running receiver if it answers, else disk.

    With ``output="json"``, one document: ``{"retry_dead": {...}, "status": {...}}``,
    each key present when asked for.
    """
    _require_store(store)
    document: dict[str, Any] = {}
    if retry_dead:
        document["retry_dead"] = _retry_dead(store, output)
    if status:
        # the receiver that says (in the store) it serves it, else the one on --port
        found = running_receiver(store)
        report = (found and _live_status(store, found[1], found[0], auth)) or _live_status(
            store, port, host, auth
        )
        if report is None:
            report = {"worker": "not running", **disk_status(store)}
        document["status"] = report
        if output == "text":
            print_lines([_split_label(line) for line in format_status(report)])
    if output == "json":
        echo_json(document)


def _require_store(store: Path) -> None:
    """Exit 2, saying why on stderr, unless ``store`` is a pmtk store (a user's folder
    is not read as a store)."""
    from toolkit.store import NotAStore
    from toolkit.store.layout import claim as _claim
    from toolkit.webhooks.target import LAKE_JOURNALS

    if store.parent.name == LAKE_JOURNALS and store.is_dir():
        return  # a lake's receiver folder (--deployment): the lake is not a store
    if not store.is_dir():
        typer.echo(f"error: there is no store at {store}", err=True)
        raise typer.Exit(2)
    try:
        _claim(store)
    except NotAStore as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _retry_dead(store: Path, output: str) -> dict[str, Any]:
    """``--retry-dead``: queue the dead letters again; what was done (said too, as text)."""
    queue = EventQueue(store)
    requeued, _kept = queue.requeue_dead()
    if output == "text":
        typer.echo(f"requeued {requeued} dead letter(s)")
    return {"requeued": requeued, "journal": str(queue.path.resolve())}


def _list_dead(store: Path, output: str) -> None:
    """``--dead-letters``: each dead letter, oldest first, with its reason."""
    _require_store(store)
    queue = EventQueue(store)
    letters = queue.dead_letters()
    evicted = queue.evicted()
    if output == "json":
        echo_json(
            {"dead_letters": letters, "evicted": evicted, "journal": str(queue.path.resolve())}
        )
        return
    for letter in letters:
        record = letter.get("record") or letter["file"]
        attempts = letter.get("attempts")
        tried = f", {attempts} attempt(s)" if attempts is not None else ""
        typer.echo(f"{letter.get('dead_at') or '-'}  {record}{tried}: {letter['reason']}")
    typer.echo(
        f"{len(letters)} dead letter(s) in {queue.path}"
        + (f"; {evicted} older one(s) removed to keep the bounds" if evicted else "")
        + ("; pmtk listen --retry-dead requeues them" if letters else "")
    )


def _split_label(line: str) -> tuple[str, str]:
    """``("queued:       ", "3 change(s), ...")``: the padded label and its value."""
    label, _, value = line.partition(":")
    padded = len(label) + 1 + len(value) - len(value.lstrip(" "))
    return line[:padded], line[padded:]


def _live_status(
    store: Path, port: int, host: str, auth: AuthHeader | None = None
) -> dict[str, Any] | None:
    """The running receiver's ``GET /status`` for this store, or ``None``."""
    import httpx
    import orjson

    target = host if is_loopback(host) else LOOPBACK
    shown = f"[{target}]" if ":" in target else target
    headers: dict[bytes, bytes] = {}
    if auth is not None:
        headers[auth.name.encode()] = auth.value_for_sending().encode()
    try:
        answer = httpx.get(
            f"http://{shown}:{port}/status", timeout=3.0, trust_env=False, headers=headers
        )
        report = orjson.loads(answer.content) if answer.status_code == 200 else None
    except (httpx.HTTPError, orjson.JSONDecodeError):
        return None
    if not isinstance(report, dict) or report.get("store") != str(store.resolve()):
        return None  # nothing there, or a receiver of another store
    return report


def format_status(report: dict[str, Any]) -> list[str]:
    """``--status`` as lines a person reads."""
    queue = report.get("queue") or {}
    age = queue.get("oldest_unapplied_age_s")
    lines = [
        f"store:        {report.get('store')}",
        f"worker:       {report.get('worker')}"
        + (f" ({report['restarts']} restart(s))" if report.get("restarts") else ""),
        f"accepting:    {_accepting(report)}",
        f"queued:       {queue.get('events', 0)} change(s), {queue.get('bytes', 0):,} of "
        f"{queue.get('max_bytes', 0):,} bytes",
        f"oldest:       {'-' if age is None else f'{age:.1f} s unapplied'}",
    ]
    if queue.get("next_retry_in_s") is not None:
        lines.append(f"next retry:   in {queue['next_retry_in_s']:.1f} s")
    for rtype, count in sorted((queue.get("waiting_for_sync") or {}).items()):
        lines.append(
            f"waiting:      {count} {rtype} change(s) until a sync makes the table "
            f"(pmtk sync --resource {rtype})"
        )
    evicted = report.get("dead_letters_evicted") or 0
    lines.append(
        f"dead letters: {report.get('dead_letters', 0)}"
        + (f" ({evicted} older one(s) removed to keep the bounds)" if evicted else "")
        + (
            f" in {report.get('journal')} (pmtk listen --retry-dead requeues them)"
            if report.get("dead_letters")
            else ""
        )
    )
    lines.extend(_event_lines(report.get("events") or {}))
    error = report.get("last_error")
    resolved = report.get("resolved_error")
    if resolved and not error:
        lines.append(
            f"resolved:     {resolved.get('text')} (it has succeeded since, "
            f"{resolved.get('resolved_s_ago', 0):.0f} s ago)"
        )
    if not error:
        lines.append("last error:   -")
    else:
        age_s = error.get("age_s")
        when = "" if age_s is None else f"{age_s:.0f} s ago: "
        lines.append(f"last error:   {when}{error.get('text')}")
    return lines


def _event_lines(events: dict[str, Any]) -> list[str]:
    """Replays not queued again, event numbers still missing, and the last gap healed."""
    lines: list[str] = []
    if events.get("duplicates"):
        lines.append(f"replays:      {events['duplicates']} event(s) received again, not re-read")
    for name, sub in sorted((events.get("subscriptions") or {}).items()):
        count = sub.get("missing_count") or 0
        if count:
            shown = ", ".join(str(n) for n in sub.get("missing") or [])
            more = f" and {count - len(sub.get('missing') or [])} more" if count > 50 else ""
            lines.append(
                f"missing:      {count} event(s) of {name}: {shown}{more} "
                f"(waiting {sub.get('oldest_missing_s', 0):.0f} s; a sync heals them)"
            )
    gap = events.get("last_gap")
    if gap:
        lines.append(
            f"last gap:     {gap.get('missing_count')} event(s) of {gap.get('subscription')} "
            f"never arrived ({', '.join(str(n) for n in gap.get('missing') or [])}); "
            f"healed by a sync of {', '.join(gap.get('types') or []) or 'nothing'}"
        )
    return lines


def _accepting(report: dict[str, Any]) -> str:
    if "accepting" not in report:
        return "no receiver answers for this store"
    if report["accepting"]:
        return "yes (202)"
    return f"no, 503 with Retry-After: {report.get('refusing_because')}"
