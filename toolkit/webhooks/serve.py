"""The receiver served with uvicorn and its worker run: :func:`listen`, ``pmtk listen``'s core.

Everything is checked before anything is bound (the authentication, the ``Host``
names); the store is claimed and given a manifest, the receiver served on the hardened
protocol of :mod:`toolkit._protocol`, and the worker started once this process holds
the journal's lock (:mod:`toolkit.webhooks.handover`). The command line is
:mod:`toolkit.webhooks.command`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import toolkit
from toolkit._cli import is_plain
from toolkit._protocol import Limits, guarded_config
from toolkit._serving import start
from toolkit.errors import ConfigurationError
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
from toolkit.webhooks.journal import DEFAULT_MAX_DEAD_BYTES, DEFAULT_MAX_DEAD_LETTERS
from toolkit.webhooks.listener import DEFAULT_MAX_AGE, DEFAULT_MAX_ATTEMPTS, Listener
from toolkit.webhooks.queue import AuthHeader
from toolkit.webhooks.receiver import make_app, split_host
from toolkit.webhooks.status import remove_receiver_file, write_receiver_file

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
    # head size, head and body deadlines, body cap, connection cap (toolkit/_protocol.py)
    return guarded_config(
        make_app(listener),
        limits,
        host=host,
        port=port,
        log_level=log_level,
        timeout_keep_alive=5,
        # asyncio accepts up to ``backlog`` connections each time the socket is
        # readable, before any is refused: at the cap, a flood cannot take more
        # descriptors at once than the cap (uvicorn's default is 2048)
        backlog=max(16, limits.max_connections or 256),
        # uvicorn's own lines (on stderr) in colour only where pmtk's are (NO_COLOR, a pipe)
        use_colors=None if not is_plain(sys.stderr) else False,
    )
