"""``pmtk listen``: the command line of the receiver (:mod:`toolkit.webhooks.serve`).

Receiving until Ctrl-C, with its lines or JSON Lines, and looking at a store's queue
instead: ``--status``, ``--dead-letters``, ``--retry-dead``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

import toolkit
from toolkit import catalogue
from toolkit._options import BaseUrl, ClientId, ClientSecret, connection_settings
from toolkit._serving import until_interrupted
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
from toolkit.webhooks.events import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE_BYTES
from toolkit.webhooks.journal import DEFAULT_MAX_DEAD_BYTES, DEFAULT_MAX_DEAD_LETTERS, EventQueue
from toolkit.webhooks.listener import DEFAULT_MAX_ATTEMPTS
from toolkit.webhooks.queue import AuthHeader
from toolkit.webhooks.serve import LOOPBACK, check_auth, is_loopback, listen
from toolkit.webhooks.status import disk_status, running_receiver

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
