"""Benchmark: sustained webhook traffic, clean and with a tenth of reads failing (not collected).

Run::

    uv run python tests/benchmarks/bench_webhooks.py [--rate 50] [--seconds 60] [--concurrency 8]

One mock (pacing off) announces its writes to a :func:`toolkit.listen` receiver
over loopback, as the live service would. The receiver reads each changed record
through a small relay (``tests/listen/flaky.py``) that passes every call on to
the mock, or, in the second scenario, answers every tenth record read with a 500.
The mock delivers ``--concurrency`` announcements at once (its default, 8; 1 is
the one-at-a-time sender of the first measurement).
A writer PATCHes the ``description`` of Appointments at ``--rate`` a second for
``--seconds`` (each write a new text), paced on a fixed schedule.

For each write the benchmark notes when the PATCH returned and when the receiver
committed that record next (``listener.stats.applied_at``, polled every 10 ms):
that is the change's **freshness** (mock -> webhook -> queue -> GET -> store).
**Lost** counts the records whose stored description is not the last one written
once everything settled, plus dead letters. **Requests per change** is the
receiver's client requests (tokens excluded) over the writes.

Baseline, measured in the same run: the floor of one change, the same GET and
:func:`toolkit.store.apply_changes` called directly for one record at a time, with
no webhook, queue or HTTP receiver in between; its requests per change is 1.00.
With a tenth of the reads failing the fewest requests any reader can send is
1 / 0.9 = 1.11 per change.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.listen.flaky

from tests.listen.flaky import Policy, every_nth, flaky_upstream, made_through
from toolkit.client import Client
from toolkit.mock import serve
from toolkit.store import apply_changes, load, sync
from toolkit.webhooks import listen

USER_AGENT = "pmtk-bench (bench@example.invalid)"
HEADER = "Authorization: Bearer bench-webhook-secret"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _client(base_url: str, dep: Any) -> Client:
    return Client(
        base_url=base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
        user_agent=USER_AGENT,
    )


def _api(dep: Any) -> httpx.Client:
    token = httpx.post(
        f"{dep.base_url}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": dep.client_id,
            "client_secret": dep.client_secret,
        },
        headers={"User-Agent": USER_AGENT},
    ).json()["access_token"]
    return httpx.Client(
        base_url=dep.base_url + "/",
        headers={
            "Authorization": f"Bearer {token}",
            "User-Agent": USER_AGENT,
            "Content-Type": "application/merge-patch+json",
        },
        timeout=30,
    )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Tracker(threading.Thread):
    """Notes each new application time of each record (``stats.applied_at``), and the
    deepest backlog seen at each stage: the mock's undelivered announcements, the
    receiver's queue."""

    def __init__(self, marks: dict[str, float], dep: Any, receiver: Any) -> None:
        super().__init__(daemon=True)
        self.marks = marks
        self.dep = dep
        self.receiver = receiver
        self.applied: dict[str, list[float]] = {}
        self.undelivered = 0
        self.queued = 0
        self.worst_at = 0.0  # seconds into the run when the mock's backlog was deepest
        self.stop = threading.Event()

    def run(self) -> None:
        began = time.perf_counter()
        while not self.stop.wait(0.01):
            pending = self.dep.webhook_stats()["pending"]
            if pending > self.undelivered:
                self.undelivered = pending
                self.worst_at = time.perf_counter() - began
            self.queued = max(self.queued, self.receiver.queue.count())
            for mark, at in list(self.marks.items()):
                times = self.applied.setdefault(mark.split("/", 1)[1], [])
                if not times or times[-1] != at:
                    times.append(at)


def scenario(
    name: str,
    dep: Any,
    api: httpx.Client,
    store: Path,
    ids: list[str],
    port: int,
    args: argparse.Namespace,
    policy: Policy,
) -> dict[str, Any]:
    """One run of ``args.rate`` writes a second for ``args.seconds``; its figures."""
    total = int(args.rate * args.seconds)
    with (
        flaky_upstream(dep.base_url, policy) as relay,
        _client(made_through(store, relay.base_url), dep) as client,
        listen(store, client=client, port=port, auth_header=HEADER, catch_up=False) as receiver,
    ):
        client.read("Appointment", ids[0])  # the token, outside the figures
        before = client.requests_sent
        tracker = Tracker(receiver.stats.applied_at, dep, receiver)
        tracker.start()
        written: list[tuple[str, str, float]] = []
        started = time.perf_counter()
        late = 0
        for n in range(total):
            due = started + n / args.rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            else:
                late += 1
            rid = ids[n % len(ids)]
            text = f"bench-{name}-{n}"
            api.patch(f"Appointment/{rid}", json={"description": text}).raise_for_status()
            written.append((rid, text, time.time()))
        elapsed = time.perf_counter() - started
        settled = dep.webhooks_sent(120) and receiver.wait_idle(120)
        time.sleep(0.05)
        tracker.stop.set()
        tracker.join()
        requests = client.requests_sent - before
        status = receiver.status()
        broken = relay.broken
    fresh: list[float] = []
    missing = 0
    for rid, _text, at in written:
        after = [t for t in tracker.applied.get(rid, []) if t >= at]
        if after:
            fresh.append(after[0] - at)
        else:
            missing += 1
    last = {rid: text for rid, text, _at in written}
    stored = load("Appointment", store).filter(pl.col("id").is_in(list(last)))
    final = dict(zip(stored["id"].to_list(), stored["description"].to_list(), strict=True))
    lost = sum(1 for rid, text in last.items() if final.get(rid) != text)
    return {
        "name": name,
        "writes": total,
        "rate": total / elapsed,
        "late": late,
        "settled": settled,
        "lost": lost + status["dead_letters"],
        "unseen": missing,
        "fresh": fresh,
        "requests": requests,
        "broken": broken,
        "retried": status["retried"],
        "undelivered": tracker.undelivered,
        "queued": tracker.queued,
        "worst_at": tracker.worst_at,
        "batches": receiver.stats.batches,
        "group_commits": receiver.queue.group_commits,
        "grouped": receiver.queue.grouped,
        "in_flight": dep.webhook_stats()["most_in_flight"],
        "load": os.getloadavg(),
    }


def floor(client: Client, store: Path, ids: list[str]) -> list[float]:
    """Seconds for one GET and one :func:`apply_changes` commit, per change, directly."""
    times = []
    for rid in ids:
        t0 = time.perf_counter()
        record = client.read("Appointment", rid)
        apply_changes("Appointment", store, upserts=[record])
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", default="small")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--floor-changes", type=int, default=100)
    parser.add_argument(
        "--concurrency", type=int, default=8, help="announcements the mock has in flight at once"
    )
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    port = _free_port()
    with (
        serve(
            seed=0,
            scale=args.scale,
            rate_limit=1_000_000,
            test_controls=True,
            webhook=f"http://127.0.0.1:{port}/webhook",
            webhook_header=HEADER,
            webhook_concurrency=args.concurrency,
        ) as dep,
        _client(dep.base_url, dep) as direct,
        _api(dep) as api,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store = Path(tmp) / "store"
        t0 = time.perf_counter()
        sync(direct, store, resources=["Patient", "Appointment"], progress=False)
        print(f"initial sync: {time.perf_counter() - t0:.1f} s ({args.scale} scale)")
        ids = load("Appointment", store)["id"].to_list()
        base = floor(direct, store, ids[: args.floor_changes])
        runs = [
            scenario("clean", dep, api, store, ids, port, args, lambda *_: None),
            scenario("flaky", dep, api, store, ids, port, args, every_nth(10)),
        ]
    print(
        f"{args.rate:g} writes/s for {args.seconds:g} s per scenario, over "
        f"{len(ids)} Appointments, {args.concurrency} deliveries in flight at most; "
        f"freshness = PATCH returned -> record committed"
    )
    print()
    head = (
        f"{'path':<34} {'changes':>8} {'rate/s':>7} {'lost':>5} {'median':>8} {'p99':>8} "
        f"{'max':>8} {'req/change':>11}"
    )
    print(head)
    print("-" * len(head))
    print(
        f"{'floor: GET + commit, direct':<34} {len(base):>8} {'-':>7} {'-':>5} "
        f"{statistics.median(base):>7.3f}s {_pct(base, 0.99):>7.3f}s {max(base):>7.3f}s "
        f"{1.0:>11.2f}"
    )
    for run in runs:
        fresh = run["fresh"]
        label = (
            "webhooks, clean upstream"
            if run["name"] == "clean"
            else "webhooks, 10 % of reads answer 500"
        )
        print(
            f"{label:<34} {run['writes']:>8} {run['rate']:>7.1f} {run['lost']:>5} "
            f"{statistics.median(fresh) if fresh else float('nan'):>7.3f}s "
            f"{_pct(fresh, 0.99):>7.3f}s {max(fresh) if fresh else float('nan'):>7.3f}s "
            f"{run['requests'] / run['writes']:>11.2f}"
        )
    print()
    for run in runs:
        print(
            f"{run['name']}: {run['broken']} reads broken by the relay, {run['retried']} "
            f"changes retried, {run['unseen']} writes without a later commit, "
            f"{run['late']} writes sent late by the pacer, settled={run['settled']}; "
            f"deepest backlog: {run['undelivered']} announcements not yet delivered by the "
            f"mock (at {run['worst_at']:.0f} s), {run['queued']} changes queued in the "
            f"receiver; {run['batches']} batches; {run['grouped']} deliveries written in "
            f"{run['group_commits']} group commits; at most {run['in_flight']} in flight; "
            f"load average at the end {' '.join(f'{x:.2f}' for x in run['load'])}"
        )
    print("ideal requests per change: 1.00 clean, 1.11 with a tenth of reads failing")
    print("targets: 0 lost, freshness p99 < 2 s, requests per change near the ideal")


if __name__ == "__main__":
    main()
