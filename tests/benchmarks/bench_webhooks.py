"""Benchmark: sustained webhook traffic, clean and with a tenth of reads failing (not collected).

Run::

    uv run python tests/benchmarks/bench_webhooks.py [--rate 50] [--seconds 60]
        [--concurrency 8] [--scale small]

``--seconds 15`` is the short form (about 2 minutes in all on a quiet 2-core machine);
the default (60 s per scenario) takes about 3 to 4. ``--logs DIR`` keeps each
process's stdout and stderr.

Every part runs in a process of its own, as it would in production, so that none
waits for another's interpreter lock:

* ``pmtk mock`` (its API and its webhook sender; rate limit off) announces each
  write to the receiver over loopback, ``--concurrency`` announcements in flight;
* a relay (this file run with ``--relay``: ``tests/listen/flaky.py``) passes the
  receiver's calls on to the mock or, in the second scenario, answers every tenth
  record read with a 500;
* ``pmtk listen --output json`` (its client's pacing off) keeps the store current,
  reading each changed record through the relay;
* this process: the writer, which PATCHes the ``description`` of Appointments at
  ``--rate`` a second for ``--seconds`` on a fixed schedule (each write a new
  text), and the watcher.

**Freshness** is the time from the mock acknowledging a PATCH (its answer read by
the writer) to the new description being visible in the store on disk. The watcher
checks the store's ``manifest.json`` every 5 ms; a commit replaces the manifest with
``rename``, which sets the new file's ``ctime``: that is the moment the commit became
visible, whenever the watcher gets to it. The watcher reads the manifest and its
``ctime`` from one open file, then the Appointment table that manifest names, so
what it sees is exactly what that commit made visible. (The receiver's JSON log has
one line per commit, but it names no records and is written after the commit; its
count is printed as a check that no commit went unseen.)

**Lost** counts the written records whose stored description differs from the
mock's once everything settled (and the mock's from the last text written), plus dead
letters. **Requests per change** is the record reads the relay received over the writes.

Baseline, measured in the same run: the floor of one change, the same GET and
:func:`toolkit.store.apply_changes` called directly for one record at a time, in this
process, with no webhook, queue or HTTP receiver in between; its requests per change
is 1.00. With a tenth of the reads failing the fewest requests any reader can send
is 1 / 0.9 = 1.11 per change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.listen.flaky

from tests.listen.flaky import every_nth, flaky_upstream, made_through
from toolkit.client import Client
from toolkit.store import apply_changes, load, sync

USER_AGENT = "pmtk-bench (bench@example.invalid)"
HEADER = "Authorization: Bearer bench-webhook-secret"
PMTK = str(Path(sys.executable).parent / "pmtk")  # what `uv run pmtk` runs
START_TIMEOUT = 120.0
SETTLE_TIMEOUT = 120.0
TAKE_OVER_TIMEOUT = 240.0
"""Seconds a taken-over receiver may take to exit (it finishes its batch first)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- child processes -------------------------------------------------------------------


class Child:
    """A child process; a thread reads its stdout lines (so the pipe never fills).

    ``stop`` sends SIGINT (Ctrl-C: the pmtk commands stop cleanly), then kills it
    if it has not ended in 20 s.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.err_path = logs / f"{name}.stderr"
        self._err = self.err_path.open("w")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=env,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.kept: list[str] = []
        self.out_path = logs / f"{name}.stdout"
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.kept.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        """The first stdout line (from now on) matching ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._fail(f"no line matching {pattern!r} within {timeout:.0f} s")
            if line is None:
                self._fail(f"ended (exit {self.proc.wait()}) before a line matching {pattern!r}")
            assert line is not None
            matched = re.search(pattern, line)
            if matched:
                return matched

    def _fail(self, what: str) -> None:
        tail = self.err_path.read_text(errors="replace")[-2000:]
        msg = f"{self.name} {what}; its stderr ends with:\n{tail}"
        raise RuntimeError(msg)

    def ask(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self._reader.join(timeout=5)
        self._err.close()
        self.out_path.write_text("".join(self.kept))
        return self.proc.returncode


@contextlib.contextmanager
def child(name: str, argv: list[str], env: dict[str, str], logs: Path) -> Iterator[Child]:
    """A :class:`Child`, stopped when the block ends (also on an error or Ctrl-C)."""
    running = Child(name, argv, env, logs)
    try:
        yield running
    finally:
        running.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env.update(PM_USER_AGENT=USER_AGENT, NO_COLOR="1", PYTHONUNBUFFERED="1", **extra)
    return env


def start_mock(args: argparse.Namespace, receiver_port: int, logs: Path) -> Any:
    argv = [
        PMTK,
        "mock",
        "--port",
        "0",
        "--scale",
        args.scale,
        "--rate-limit",
        "100000000",
        "--webhook",
        f"http://127.0.0.1:{receiver_port}/webhook",
        "--webhook-concurrency",
        str(args.concurrency),
    ]
    return child("mock", argv, _env(PM_WEBHOOK_AUTH=HEADER), logs)


def start_relay(upstream: str, break_every: int, logs: Path) -> Any:
    argv = [sys.executable, __file__, "--relay", upstream, "--break-every", str(break_every)]
    return child(f"relay-{break_every}", argv, _env(), logs)


def receiver(
    store: Path,
    port: int,
    relay: str,
    creds: dict[str, str],
    logs: Path,
    *,
    name: str = "listen",
    catch_up: bool = False,
    take_over: bool = False,
) -> Child:
    """A running ``pmtk listen`` (stopped by the caller). The first one of a scenario
    skips the catch-up (the store was just synced); a restarted one runs it, as an
    operator's restart does; ``take_over`` starts it with ``--take-over``."""
    argv = [
        PMTK,
        "listen",
        "--store",
        str(store),
        "--port",
        str(port),
        "--base-url",
        relay,
        "--catch-up" if catch_up else "--no-catch-up",
        "--requests-per-minute",
        "0",
        "--output",
        "json",
        *(["--take-over"] if take_over else []),
    ]
    env = _env(PM_CLIENT_ID=creds["id"], PM_CLIENT_SECRET=creds["secret"], PM_WEBHOOK_AUTH=HEADER)
    return Child(name, argv, env, logs)


class Restarter(threading.Thread):
    """Restarts the receiver ``after`` seconds on the same port: ``current`` is the one
    running. Stop-and-start (``take_over`` false): Ctrl-C, as an operator or a deploy
    does, then a new process; ``down`` is the wall-clock time from the stop to the new
    one's "listening" line. ``take_over``: a new ``pmtk listen --take-over`` serves
    beside the old one and stops it; ``handed`` is the time from its start to the old
    process's exit and to its "listening" line (its worker running)."""

    def __init__(
        self, first: Child, after: float | None, start_again: Any, *, take_over: bool = False
    ) -> None:
        super().__init__(daemon=True)
        self.current = first
        self.all = [first]
        self.after = after
        self.start_again = start_again
        self.take_over = take_over
        self.down: tuple[float, float] | None = None
        self.handed: tuple[float, float, float] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        if self.after is None:
            return
        time.sleep(self.after)
        try:
            if self.take_over:
                self._take_over()
                return
            stopped_at = time.time()
            self.current.stop()
            again: Child = self.start_again()
            self.all.append(again)
            self.current = again
            again.expect(r'"event": "listening"')
            self.down = (stopped_at, time.time())
        except BaseException as exc:  # reported by the scenario, not lost in this thread
            self.error = exc

    def _take_over(self) -> None:
        began = time.time()
        old = self.current
        again: Child = self.start_again(take_over=True)
        self.all.append(again)
        self.current = again
        old.proc.wait(timeout=TAKE_OVER_TIMEOUT)
        old_gone = time.time()
        again.expect(r'"event": "listening"')
        self.handed = (began, old_gone, time.time())

    def stop_all(self) -> None:
        if self.is_alive() or self.ident is not None:
            self.join()
        for rx in self.all:
            rx.stop()


def relay_main(upstream: str, break_every: int) -> None:
    """``--relay``: serve a relay until stdin ends; ``stats`` on stdin prints its counts."""
    policy = every_nth(break_every) if break_every else (lambda *_: None)
    with flaky_upstream(upstream, policy, rewrite_links=True) as relay:
        print(f"relay: {relay.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            for line in sys.stdin:
                if line.strip() == "stats":
                    with relay.lock:
                        reads = sum(relay.reads.values())
                    print(
                        json.dumps({"reads": reads, "broken": relay.broken, "calls": relay.calls}),
                        flush=True,
                    )


def relay_stats(relay: Child) -> dict[str, int]:
    relay.ask("stats")
    return dict(json.loads(relay.expect(r"^\{.*\}$").group(0)))


# -- watching the store ----------------------------------------------------------------


class Watcher(threading.Thread):
    """Sees each commit of the store: which written texts became visible, and when.

    ``pending`` maps a record id to its writes not yet seen, ``(n, acked_at)`` in
    write order (``n`` is in the text, ``bench-<scenario>-<n>``); a write counts as
    visible when the stored text is that write's or a later one of the same record.
    """

    def __init__(self, store: Path, scenario: str) -> None:
        super().__init__(daemon=True)
        self.manifest = store / "manifest.json"
        self.journal = store / ".webhooks" / "journal.sqlite3"
        self.store = store
        self.prefix = f"bench-{scenario}-"
        self.lock = threading.Lock()
        self.pending: dict[str, list[tuple[int, float]]] = {}
        self.fresh: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self.commits = 0
        self.queued = 0
        self.stop = threading.Event()

    def wrote(self, rid: str, n: int, acked_at: float) -> None:
        with self.lock:
            self.pending.setdefault(rid, []).append((n, acked_at))
            self.acked[n] = acked_at

    def outstanding(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.pending.values())

    def run(self) -> None:
        seen: tuple[int, int] | None = None
        ticks = 0
        while not self.stop.wait(0.005):
            ticks += 1
            if ticks % 10 == 0:
                self._sample_queue()
            try:
                stat = self.manifest.stat()
            except FileNotFoundError:
                continue
            if (stat.st_ino, stat.st_ctime_ns) == seen:
                continue
            got = self._read_commit()
            if got is None:
                continue  # replaced again while being read: read the newer one
            seen, committed_ns, table = got
            self.commits += 1
            self._match(table, committed_ns / 1e9)

    def _read_commit(self) -> tuple[tuple[int, int], int, dict[str, str]] | None:
        try:
            with self.manifest.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                manifest = orjson.loads(handle.read())
            path = manifest["resources"]["Appointment"]["tables"]["Appointment"]["path"]
            frame = pl.read_parquet(self.store / path, columns=["id", "description"])
        except (FileNotFoundError, orjson.JSONDecodeError, KeyError):
            return None
        table = dict(zip(frame["id"].to_list(), frame["description"].to_list(), strict=True))
        return (stat.st_ino, stat.st_ctime_ns), stat.st_ctime_ns, table

    def _match(self, table: dict[str, str], at: float) -> None:
        with self.lock:
            for rid in list(self.pending):
                text = table.get(rid) or ""
                if not text.startswith(self.prefix):
                    continue
                shown = int(text.removeprefix(self.prefix))
                writes = self.pending[rid]
                left = [(n, acked) for n, acked in writes if n > shown]
                for n, acked in writes:
                    if n <= shown:
                        self.fresh[n] = max(0.0, at - acked)
                if left:
                    self.pending[rid] = left
                else:
                    del self.pending[rid]

    def _sample_queue(self) -> None:
        """The unapplied changes in the receiver's journal (read-only, with plain sqlite3)."""
        import sqlite3

        if not self.journal.exists():
            return
        with (
            contextlib.suppress(sqlite3.Error),
            contextlib.closing(
                sqlite3.connect(f"file:{self.journal}?mode=ro", uri=True, timeout=1)
            ) as db,
        ):
            (events,) = db.execute(
                "SELECT count(*) FROM changes WHERE state IN ('queued', 'claimed', 'read')"
            ).fetchone()
            self.queued = max(self.queued, int(events))


# -- one scenario ----------------------------------------------------------------------


def _api(base_url: str, creds: dict[str, str]) -> httpx.Client:
    token = httpx.post(
        f"{base_url}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": creds["id"],
            "client_secret": creds["secret"],
        },
        headers={"User-Agent": USER_AGENT},
        trust_env=False,
    ).json()["access_token"]
    return httpx.Client(
        base_url=base_url + "/",
        headers={
            "Authorization": f"Bearer {token}",
            "User-Agent": USER_AGENT,
            "Content-Type": "application/merge-patch+json",
        },
        timeout=30,
        trust_env=False,
    )


def _write_paced(
    api: httpx.Client, watcher: Watcher, ids: list[str], name: str, args: argparse.Namespace
) -> tuple[dict[str, str], float, int]:
    """PATCH at ``args.rate`` on a fixed schedule: the last text per id, the rate, late ones."""
    total = int(args.rate * args.seconds)
    last: dict[str, str] = {}
    late = 0
    started = time.perf_counter()
    for n in range(total):
        pause = started + n / args.rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            late += 1
        rid = ids[n % len(ids)]
        text = f"bench-{name}-{n}"
        api.patch(f"Appointment/{rid}", json={"description": text}).raise_for_status()
        watcher.wrote(rid, n, time.time())
        last[rid] = text
    return last, total / (time.perf_counter() - started), late


def _lost(direct: Client, store: Path, last: dict[str, str]) -> tuple[int, int]:
    """Written records whose stored description differs from the mock's, and records
    whose mock description is not the last text written (the writer's own check)."""
    served = {
        str(r["id"]): r.get("description")
        for r in direct.records("Appointment")
        if str(r.get("id")) in last
    }
    stored_frame = pl.DataFrame(load("Appointment", store)).filter(pl.col("id").is_in(list(last)))
    stored = dict(
        zip(stored_frame["id"].to_list(), stored_frame["description"].to_list(), strict=True)
    )
    lost = sum(1 for rid in last if stored.get(rid) != served.get(rid))
    unwritten = sum(1 for rid, text in last.items() if served.get(rid) != text)
    return lost, unwritten


def scenario(
    name: str, break_every: int, setup: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """One run of ``args.rate`` writes a second for ``args.seconds``; its figures.

    ``restart`` stops the receiver halfway through the writes and starts it again
    (with its catch-up sync); ``poll`` runs no receiver but a process that syncs the
    store every ``args.poll_every`` seconds (the baseline webhooks replace).
    """
    store: Path = setup["store"]
    logs: Path = setup["logs"]
    ids: list[str] = setup["ids"]
    load_start = os.getloadavg()
    with (
        start_relay(setup["base_url"], break_every, logs) as relay,
        _api(setup["base_url"], setup["creds"]) as api,
    ):
        relay_url = relay.expect(r"relay: (\S+)").group(1)
        made_through(store, relay_url)
        watcher = Watcher(store, name)
        watcher.start()

        def start_again(first: bool = False, take_over: bool = False) -> Child:
            if name == "poll":
                return poller(store, relay_url, setup["creds"], logs, args.poll_every)
            return receiver(
                store,
                setup["port"],
                relay_url,
                setup["creds"],
                logs,
                name="listen" if first else "listen-again",
                catch_up=not first,
                take_over=take_over,
            )

        ready = r'"event": "polled"' if name == "poll" else r'"event": "listening"'
        restarter = Restarter(
            start_again(first=True),
            args.seconds / 2 if name in ("restart", "take-over") else None,
            start_again,
            take_over=name == "take-over",
        )
        try:
            restarter.current.expect(ready)
            # warm up outside the figures: the receiver's token, the connections
            api.patch(f"Appointment/{ids[-1]}", json={"description": f"bench-{name}-{10**9}"})
            watcher.wrote(ids[-1], 10**9, time.time())
            _wait(lambda: watcher.outstanding() == 0, 60)
            watcher.fresh.clear()
            commits_before = watcher.commits
            logged_before = _commit_lines(restarter.current)
            reads_before = relay_stats(relay)
            restarter.start()
            last, rate, late = _write_paced(api, watcher, ids[:-1], name, args)
            settled = _wait(lambda: watcher.outstanding() == 0, SETTLE_TIMEOUT)
            reads = relay_stats(relay)
        finally:
            restarter.stop_all()
            watcher.stop.set()
            watcher.join()
    if restarter.error is not None:
        raise RuntimeError(f"the restart failed: {restarter.error}") from restarter.error
    finals = [_stopped_status(rx) for rx in restarter.all]
    lost, unwritten = _lost(setup["direct"], store, last)
    writes = int(args.rate * args.seconds)
    return {
        "name": name,
        "writes": writes,
        "rate": rate,
        "late": late,
        "settled": settled,
        "lost": lost + unwritten + _total(finals, "dead_letters"),
        "unseen": writes - len(watcher.fresh),
        "fresh": list(watcher.fresh.values()),
        "fresh_by_write": dict(watcher.fresh),
        "acked": dict(watcher.acked),
        "down": restarter.down,
        "handed": restarter.handed,
        "requests": reads["reads"] - reads_before["reads"],
        "calls": reads["calls"] - reads_before["calls"],
        "broken": reads["broken"] - reads_before["broken"],
        "worker_requests": _total(finals, "requests"),
        "retried": _total(finals, "retried"),
        "queued": watcher.queued,
        "commits_seen": watcher.commits - commits_before,
        "commits_logged": sum(_commit_lines(rx) for rx in restarter.all) - logged_before,
        "load": (load_start, os.getloadavg()),
    }


def _total(statuses: list[dict[str, Any]], key: str) -> int:
    return sum(int(status.get(key) or 0) for status in statuses)


def poller(store: Path, relay: str, creds: dict[str, str], logs: Path, every: float) -> Child:
    """The baseline: this file run with ``--poll``, an incremental sync every ``every`` s."""
    argv = [sys.executable, __file__, "--poll", str(store), "--relay", relay]
    argv += ["--poll-every", str(every)]
    env = _env(PM_CLIENT_ID=creds["id"], PM_CLIENT_SECRET=creds["secret"])
    return Child("poll", argv, env, logs)


def poll_main(store: Path, base_url: str, every: float) -> None:
    """``--poll``: sync the store's Appointments every ``every`` s (start to start) until
    Ctrl-C; a JSON line after each sync."""
    with (
        Client(
            base_url=base_url,
            client_id=os.environ["PM_CLIENT_ID"],
            client_secret=os.environ["PM_CLIENT_SECRET"],
            requests_per_minute=None,
            progress=False,
            user_agent=USER_AGENT,
        ) as client,
        contextlib.suppress(KeyboardInterrupt),
    ):
        while True:
            t0 = time.monotonic()
            sync(client, store, resources=["Appointment"], progress=False)
            took = time.monotonic() - t0
            print(json.dumps({"event": "polled", "seconds": round(took, 3)}), flush=True)
            time.sleep(max(0.0, every - took))


def _wait(done: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.02)
    return bool(done())


def _stopped_status(rx: Child) -> dict[str, Any]:
    for line in reversed(rx.kept):
        with contextlib.suppress(json.JSONDecodeError):
            item = json.loads(line)
            if item.get("event") == "stopped":
                return dict(item["status"])
    return {}


def _commit_lines(rx: Child) -> int:
    """The receiver's log lines of an Appointment commit (one per commit), or the
    poller's lines (one per sync)."""
    count = 0
    for line in list(rx.kept):
        with contextlib.suppress(json.JSONDecodeError):
            item = json.loads(line)
            if item.get("event") == "polled" or (
                item.get("event") == "log"
                and str(item.get("message", "")).startswith("Appointment: ")
            ):
                count += 1
    return count


# -- the baseline and the report -------------------------------------------------------


def floor(client: Client, store: Path, ids: list[str]) -> list[float]:
    """Seconds for one GET and one :func:`apply_changes` commit, per change, directly."""
    times = []
    for rid in ids:
        t0 = time.perf_counter()
        record = client.read("Appointment", rid)
        apply_changes("Appointment", store, upserts=[record])
        times.append(time.perf_counter() - t0)
    return times


SCENARIOS = (("clean", 0), ("flaky", 10), ("restart", 10), ("take-over", 10), ("poll", 0))
"""Each scenario's name and how often the relay breaks a record read (0: never)."""

LABELS = {
    "clean": "webhooks, clean upstream",
    "flaky": "webhooks, 10 % of reads answer 500",
    "restart": "the same + a listener restart",
    "take-over": "the same + a --take-over restart",
    "poll": "polling: a sync every {every:g} s",
}


def report(args: argparse.Namespace, base: list[float], runs: list[dict[str, Any]], n: int) -> None:
    print(
        f"{args.rate:g} writes/s for {args.seconds:g} s per scenario, over {n} Appointments, "
        f"{args.concurrency} deliveries in flight at most; mock, relay, receiver (or poller) "
        f"and writer in processes of their own; freshness = PATCH acknowledged -> visible "
        f"in the store"
    )
    print()
    head = (
        f"{'path':<36} {'changes':>8} {'rate/s':>7} {'lost':>5} {'median':>8} {'p99':>8} "
        f"{'max':>8} {'reads/change':>13} {'calls/change':>13}"
    )
    print(head)
    print("-" * len(head))
    print(
        f"{'floor: GET + commit, direct':<36} {len(base):>8} {'-':>7} {'-':>5} "
        f"{statistics.median(base):>7.3f}s {_pct(base, 0.99):>7.3f}s {max(base):>7.3f}s "
        f"{1.0:>13.2f} {1.0:>13.2f}"
    )
    for run in runs:
        print(_row(LABELS[run["name"]].format(every=args.poll_every), run, run["fresh"]))
        if run["down"] is not None:
            stopped, listening = run["down"]
            out = {n for n, at in run["acked"].items() if stopped <= at <= listening}
            rest = [f for n, f in run["fresh_by_write"].items() if n not in out]
            print(_row("  (writes acked while it was down: out)", run, rest))
    print()
    for run in runs:
        (a, b) = run["load"]
        down = ""
        if run["down"] is not None:
            stopped, listening = run["down"]
            during = sum(1 for at in run["acked"].values() if stopped <= at <= listening)
            down = (
                f"receiver down {listening - stopped:.2f} s (Ctrl-C to the new one's "
                f"'listening'), {during} writes acknowledged meanwhile; "
            )
        if run["handed"] is not None:
            began, old_gone, working = run["handed"]
            down = (
                f"taken over: the old receiver exited {old_gone - began:.2f} s after the new "
                f"one started, whose worker ran {working - began:.2f} s after it started; "
            )
        print(
            f"{run['name']}: {down}{run['broken']} reads broken by the relay, {run['retried']} "
            f"changes retried, {run['worker_requests']} reads sent by the worker; "
            f"{run['unseen']} writes never seen in the store, {run['late']} writes sent "
            f"late by the pacer, settled={run['settled']}; deepest receiver queue "
            f"{run['queued']} changes; {run['commits_seen']} commits seen by the watcher, "
            f"{run['commits_logged']} logged by the receiver or poller "
            f"({run['writes'] / max(1, run['commits_seen']):.0f} changes a commit); load average "
            f"{' '.join(f'{x:.2f}' for x in a)} -> {' '.join(f'{x:.2f}' for x in b)}"
        )
    print(
        "ideal reads per change: 1.00 clean, 1.11 with a tenth of reads failing; calls "
        "count every request the relay passed on or broke (tokens, lists, reads)"
    )
    print("targets: 0 lost, freshness p99 < 2 s, requests per change near the ideal")


def _row(label: str, run: dict[str, Any], fresh: list[float]) -> str:
    return (
        f"{label:<36} {len(fresh) if fresh is not run['fresh'] else run['writes']:>8} "
        f"{run['rate']:>7.1f} {run['lost']:>5} "
        f"{statistics.median(fresh) if fresh else float('nan'):>7.3f}s "
        f"{_pct(fresh, 0.99):>7.3f}s {max(fresh) if fresh else float('nan'):>7.3f}s "
        f"{run['requests'] / run['writes']:>13.2f} {run['calls'] / run['writes']:>13.2f}"
    )


def run(args: argparse.Namespace) -> None:
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"load average at start: {_load()} ({now}, {os.cpu_count()} cores)")
    port = _free_port()  # the receiver's: the mock must know where to announce
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(args.logs) if args.logs else Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        _run_in(args, Path(tmp), logs, port)


def _run_in(args: argparse.Namespace, tmp: Path, logs: Path, port: int) -> None:
    with start_mock(args, port, logs) as mock:
        base_url = mock.expect(r"base URL:\s+(\S+)").group(1)
        creds = {
            "id": mock.expect(r"client id:\s+(\S+)").group(1),
            "secret": mock.expect(r"client secret:\s+(\S+)").group(1),
        }
        store = Path(tmp) / "store"
        with Client(
            base_url=base_url,
            client_id=creds["id"],
            client_secret=creds["secret"],
            requests_per_minute=None,
            progress=False,
            user_agent=USER_AGENT,
        ) as direct:
            t0 = time.perf_counter()
            sync(direct, store, resources=["Patient", "Appointment"], progress=False)
            print(f"initial sync: {time.perf_counter() - t0:.1f} s ({args.scale} scale)")
            ids = pl.DataFrame(load("Appointment", store))["id"].to_list()
            base = floor(direct, store, ids[: args.floor_changes])
            setup = {
                "store": store,
                "logs": logs,
                "ids": ids,
                "base_url": base_url,
                "creds": creds,
                "port": port,
                "direct": direct,
            }
            runs = [scenario(name, every, setup, args) for name, every in args.scenarios]
    report(args, base, runs, len(ids) - 1)
    print(f"load average at the end: {_load()}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--floor-changes", type=int, default=100)
    parser.add_argument(
        "--concurrency", type=int, default=8, help="announcements the mock has in flight at once"
    )
    parser.add_argument(
        "--only",
        choices=[name for name, _ in SCENARIOS],
        action="append",
        help="run this scenario (repeatable) instead of all five",
    )
    parser.add_argument(
        "--poll-every", type=float, default=10.0, help="the polling baseline's period (10 s)"
    )
    parser.add_argument(
        "--logs", metavar="DIR", help="keep each process's stdout and stderr in DIR"
    )
    parser.add_argument("--relay", metavar="UPSTREAM", help=argparse.SUPPRESS)
    parser.add_argument("--break-every", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--poll", metavar="STORE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll:
        poll_main(Path(args.poll), args.relay, args.poll_every)
        return
    if args.relay:
        relay_main(args.relay, args.break_every)
        return
    args.scenarios = [(n, e) for n, e in SCENARIOS if not args.only or n in args.only]
    # SIGTERM stops the children as Ctrl-C does (the `with` blocks end). SIGINT is set
    # too: a shell starts a background job with SIGINT ignored, and the children would
    # inherit that and ignore the Ctrl-C that stops them cleanly.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run(args)
    except KeyboardInterrupt:
        print("interrupted; every child process was stopped", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
